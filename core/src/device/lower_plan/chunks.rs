//! Where one request's prompt is computed in a lowered program: its prompt chunks, the program
//! steps holding them and how many tokens each step computes. `replay --against` compares a
//! poaching request's prefill (PL-NO-POACH, lowered with [`super::LowerOptions::admit_poached_hits`])
//! with the same request's prefill in the fixed plan.

use std::collections::BTreeSet;

use super::LoweredPlan;
use crate::device::program::GpuOp;
use crate::plan::{Plan, PlanOp};

/// One program step computing part of a request's prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptChunk {
    /// The program step (its index in the program and in an executor's step timings).
    pub program_step: usize,
    /// The plan step it lowers.
    pub plan_step: u64,
    /// First prompt position computed.
    pub start: u64,
    /// Prompt positions computed (`start..start + tokens`).
    pub tokens: u64,
    /// Synthetic KV (`fake_compute`) materialised from the request's tokens, not a forward.
    pub synthetic: bool,
    /// New tokens the whole step computes, every request of the rank's batch.
    pub step_tokens: u64,
}

/// The prompt length of `req` on `rank`: its last `add_request` at or before `step`.
pub fn prompt_len(plan: &Plan, rank: u32, req: &str, step: u64) -> Option<u64> {
    // Plans may list steps in any order: the latest step wins (the later op within one).
    plan.steps
        .iter()
        .filter(|s| s.rank == rank && s.step <= step)
        .flat_map(|s| s.ops.iter().map(move |op| (s.step, op)))
        .filter_map(|(at, op)| match op {
            PlanOp::AddRequest { req: r, prompt, .. } if r == req => Some((at, prompt.len())),
            _ => None,
        })
        .max_by_key(|(at, _)| *at)
        .map(|(_, len)| len)
}

impl LoweredPlan {
    /// The attention prefills of `req` on `rank` that compute its first `prompt` positions, in
    /// program steps lowering plan step `from` or later, each starting where the last ended,
    /// until the prompt is computed. With the plan, a chunk lowered from a `fake_compute` is
    /// marked synthetic.
    pub fn prompt_chunks(&self, plan: Option<&Plan>, rank: u32, req: &str, from: u64, prompt: u64) -> Vec<PromptChunk> {
        let mut chunks: Vec<PromptChunk> = Vec::new();
        for (i, step) in self.program.steps.iter().enumerate() {
            let plan_step = self.steps.get(i).copied().unwrap_or(0);
            if plan_step < from {
                continue;
            }
            let mine = step.ops.iter().enumerate().find_map(|(k, op)| match op {
                GpuOp::Prefill(p) if self.request(p.req) == (rank, req) && u64::from(p.start_pos) < prompt => {
                    Some((k, u64::from(p.start_pos), p.tokens.len() as u64))
                }
                _ => None,
            });
            let Some((k, start, len)) = mine else { continue };
            // Chunks follow each other; anything else is another request of the same name.
            if chunks.last().is_some_and(|c| c.start + c.tokens != start) {
                break;
            }
            let synthetic = plan.is_some_and(|pl| {
                let at = self.origins.get(i).and_then(|o| o.get(k));
                at.and_then(|at| op_at(pl, at.step, at.rank, at.op_index))
                    .is_some_and(|op| matches!(op, PlanOp::FakeCompute { .. }))
            });
            let tokens = (start + len).min(prompt) - start;
            chunks.push(PromptChunk {
                program_step: i,
                plan_step,
                start,
                tokens,
                synthetic,
                step_tokens: self.step_new_tokens(i, rank),
            });
            if start + len >= prompt {
                break;
            }
        }
        chunks
    }

    /// New tokens program step `i` computes on `rank`: every request's attention prefill once.
    fn step_new_tokens(&self, i: usize, rank: u32) -> u64 {
        let mut seen = BTreeSet::new();
        self.program.steps[i]
            .ops
            .iter()
            .filter_map(|op| match op {
                GpuOp::Prefill(p) if self.request(p.req).0 == rank && seen.insert(p.req) => Some(p.tokens.len() as u64),
                _ => None,
            })
            .sum()
    }
}

fn op_at(plan: &Plan, step: u64, rank: u32, index: usize) -> Option<&PlanOp> {
    plan.steps
        .iter()
        .find(|s| s.step == step && s.rank == rank)
        .and_then(|s| s.ops.get(index))
}
