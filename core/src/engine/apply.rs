//! Applying plan ops to an engine. Effects the model decides (allocations) are
//! re-derived and compared with what the plan recorded; effects the planner
//! decided (shadow blocks, frees, windows) are applied as recorded and judged.

use super::content::ZERO_TAG;
use super::{Engine, Mismatch};
use crate::invariants::planner::{self, PlannerEvent};
use crate::invariants::Violation;
use crate::kv::changes::ModelChanges;
use crate::kv::NULL_BLOCK;
use crate::plan::PlanOp;

/// What applying one op found.
#[derive(Clone, Debug, Default)]
pub struct OpOutcome {
    /// Planner-invariant violations caused by this op.
    pub violations: Vec<Violation>,
    /// A short, deterministic description of the op's result (for the trace).
    pub result: String,
    /// What the op (and the faults since the last op) changed in the KV model; empty
    /// unless the engine watches its model (`Engine::watch_model`).
    pub changes: ModelChanges,
}

impl OpOutcome {
    pub(super) fn ok(result: impl Into<String>) -> Self {
        OpOutcome {
            violations: Vec::new(),
            result: result.into(),
            changes: ModelChanges::default(),
        }
    }

    /// Records what the planner checks make of `event`; true when it broke an invariant.
    pub(super) fn check(&mut self, event: PlannerEvent<'_>) -> bool {
        let found = planner::check(&event);
        let broke = !found.is_empty();
        self.violations.extend(found);
        broke
    }
}

/// What a block holds; the null block holds nothing.
pub(super) fn content_at(content: &[Option<u128>], block: u32) -> Option<u128> {
    if block == NULL_BLOCK {
        None
    } else {
        content[block as usize]
    }
}

/// Host-side bookkeeping that must stay outside timed windows (PL-TIMED-HOST).
fn is_host_bookkeeping(op: &PlanOp) -> Option<&'static str> {
    match op {
        PlanOp::CacheBlocks { .. } => Some("cache_blocks (block registration)"),
        PlanOp::RegisterShadow { .. } => Some("shadow registration"),
        PlanOp::ZeroBlocks { .. } => Some("block zeroing"),
        PlanOp::CopyBlock { .. } => Some("block copy"),
        PlanOp::HostWork { .. } => Some("host work"),
        PlanOp::FakeCompute { .. } => Some("synthetic KV injection"),
        PlanOp::ReleaseCow => Some("copy-on-write release"),
        _ => None,
    }
}

impl Engine {
    /// Apply one op. `Err` = the plan disagrees with the model.
    pub fn apply(&mut self, op: &PlanOp) -> Result<OpOutcome, Mismatch> {
        let mut pre = OpOutcome::default();
        if let Some(what) = is_host_bookkeeping(op) {
            pre.check(PlannerEvent::HostOp {
                what,
                timed: self.timed,
            });
        }
        let mut out = match op {
            PlanOp::AddRequest {
                req,
                prompt,
                cache_salt,
            } => self.add_request(req, prompt.materialise(), cache_salt.clone()),
            PlanOp::Schedule {
                req,
                num_new_tokens,
                use_prefix_cache,
                full_sequence_must_fit,
                delay_cache_blocks,
                expect,
            } => self.schedule(
                req,
                *num_new_tokens,
                *use_prefix_cache,
                *full_sequence_must_fit,
                *delay_cache_blocks,
                expect,
            )?,
            PlanOp::Forward { batch } => self.forward(batch)?,
            PlanOp::ProcessOutputs { lag } => self.process_outputs(*lag),
            PlanOp::FakeCompute { req, tokens } => self.fake_compute(req, *tokens)?,
            PlanOp::CacheBlocks { req, num_tokens } => self.cache_blocks(req, *num_tokens)?,
            PlanOp::Finish { req, fenced } => self.finish(req, *fenced)?,
            PlanOp::Shed { req, fenced } => self.shed(req, *fenced)?,
            PlanOp::Preempt { req } => self.preempt(req)?,
            PlanOp::RegisterShadow {
                shadow,
                chain,
                ctx,
                headroom,
                tail,
                groups,
                ok,
                covered,
                random_state,
            } => self.register_shadow(
                shadow,
                chain,
                *ctx,
                *headroom,
                *tail,
                groups,
                (*ok, *covered, *random_state),
            )?,
            PlanOp::ReleaseCow => self.release_cow(),
            PlanOp::ZeroBlocks { blocks, .. } => {
                for &b in blocks {
                    self.content[b as usize] = Some(ZERO_TAG);
                }
                OpOutcome::ok(format!("zeroed {}", blocks.len()))
            }
            PlanOp::CopyBlock { src, dst, .. } => {
                self.content[*dst as usize] = self.content[*src as usize];
                OpOutcome::ok("copied")
            }
            PlanOp::ResetPrefixCache { expect } => self.reset_prefix_cache(*expect)?,
            PlanOp::BeginTimed { point } => self.begin_timed(*point)?,
            PlanOp::EndTimed { point } => self.end_timed(*point)?,
            PlanOp::InjectPoint { point, replica } => self.inject_point(*point, *replica),
            PlanOp::HostWork { label } => OpOutcome::ok(label.clone()),
            PlanOp::EndSweep => self.end_sweep(),
            PlanOp::Observe(obs) => self.observe(obs)?,
            PlanOp::PlannerFailed { kind, error } => self.planner_failed(*kind, error)?,
        };
        pre.violations.append(&mut out.violations);
        out.violations = pre.violations;
        out.changes = self.kv.take_changes();
        Ok(out)
    }

    pub(super) fn req(&self, id: &str) -> Result<&super::EngineReq, Mismatch> {
        self.requests
            .get(id)
            .ok_or_else(|| Mismatch(format!("request \"{id}\" is not live on rank {}", self.rank)))
    }

    fn add_request(&mut self, id: &str, prompt: Vec<u64>, salt: Option<String>) -> OpOutcome {
        let mut out = OpOutcome::ok("added");
        out.check(PlannerEvent::Admitted {
            req: id,
            was_shed: self.shed.contains(id),
        });
        let r = self.new_request(prompt, salt);
        self.requests.insert(id.to_string(), r);
        out
    }
}
