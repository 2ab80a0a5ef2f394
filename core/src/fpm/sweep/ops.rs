//! The op sequences of one decode execution (dynamo_fpm.md §1.10; seed 000).

use super::SweepBuilder;
use crate::plan::{salted_at, BatchEntry, PlanOp, Tokens};

/// A per-(rank, slot) name: a request's cache salt, or what its prompt tokens are drawn from.
pub(super) type SlotName<'a> = &'a dyn Fn(u32, usize) -> String;

/// A deterministic stand-in for a request's k-th sampled token (k = 0: its prefill's;
/// k = 1 + j: its j-th decode step's). Salted per request, so a batch's continuations
/// differ and route to different MoE experts as a real batch's do (spec/plan.md §3).
pub(super) fn sampled(req: &str, k: u64, vocab: u64) -> u64 {
    // Position k of `Tokens::Salted { salt: "{req}:sample", .. }`.
    salted_at(&format!("{req}:sample"), k, vocab)
}

/// Native exact-context warm-up: prefill each request's `ctx − 1` prompt through
/// the normal scheduler, chunked by the token budget (with an align-mode state
/// group chunks end on block boundaries, as vLLM's scheduler splits them; without
/// one a chunk takes whatever budget is left).
/// Returns the untimed prefill tokens, or, when the soft deadline passed
/// mid-prefill, the slots never scheduled (the caller sheds the stage, §1.12;
/// §8.2 bug 5; the mutant of bug 5 keeps prefilling).
pub(super) fn native_prefill(
    p: &mut SweepBuilder<'_>,
    injected: &[u64],
    (salt, content): (SlotName<'_>, SlotName<'_>),
    req: SlotName<'_>,
    vocab: u64,
) -> Result<u64, Vec<usize>> {
    let ignore_deadline = p.bug(crate::bugs::BugMutant::StageBuildIgnoresDeadline);
    let budget = p.s.scenario.scheduler.max_num_batched_tokens;
    let kv = p.s.scenario.kv_config();
    let block = kv.scheduler_block_size();
    // Only align-mode state groups make vLLM's scheduler cut chunks on block edges.
    let align = kv.groups.iter().any(|g| {
        matches!(
            g.kind,
            crate::kv::GroupKind::Mamba {
                mamba_cache_mode: crate::kv::MambaMode::Align
            }
        )
    });
    let queue = p.s.scenario.scheduler.async_scheduling;
    let mut done = vec![0u64; injected.len()];
    let mut first = true;
    while done.iter().zip(injected).any(|(d, l)| d < l) {
        if !first && p.deadline_observed() && !ignore_deadline {
            return Err((0..injected.len()).filter(|&i| done[i] == 0).collect());
        }
        let mut left = budget;
        let mut chunks: Vec<(usize, u64)> = Vec::new();
        for (slot, (&d, &len)) in done.iter().zip(injected).enumerate() {
            if d >= len || left == 0 {
                continue;
            }
            let mut n = (len - d).min(left);
            if align && d + n < len {
                n = n / block * block;
                if n == 0 {
                    break;
                }
            }
            chunks.push((slot, n));
            left -= n;
        }
        let add = first;
        let (chunks_ref, done_ref) = (&chunks, &done);
        p.step(|rank| {
            let mut ops = Vec::new();
            if add {
                for (slot, &len) in injected.iter().enumerate() {
                    let prompt = Tokens::Salted {
                        salt: content(rank, slot),
                        len,
                        vocab,
                    };
                    ops.push(PlanOp::AddRequest {
                        req: req(rank, slot),
                        prompt,
                        cache_salt: Some(salt(rank, slot)),
                    });
                }
            }
            let mut batch = Vec::new();
            for &(slot, n) in chunks_ref {
                let r = req(rank, slot);
                let admitting = done_ref[slot] == 0;
                ops.push(PlanOp::Schedule {
                    req: r.clone(),
                    num_new_tokens: n,
                    use_prefix_cache: true,
                    full_sequence_must_fit: admitting,
                    delay_cache_blocks: false,
                    expect: Default::default(),
                });
                let completes = done_ref[slot] + n == injected[slot];
                let output = if completes { vec![sampled(&r, 0, vocab)] } else { vec![] };
                batch.push(BatchEntry {
                    req: r,
                    tokens: n,
                    output,
                });
            }
            ops.push(PlanOp::Forward { batch });
            // Async scheduling's batch queue: a chunk's outputs land when the next step has
            // been scheduled, so its tokens are still in flight then (vLLM frees and
            // retires below the processed tokens only).
            ops.push(PlanOp::ProcessOutputs { lag: u64::from(queue) });
            ops
        });
        for &(slot, n) in &chunks {
            done[slot] += n;
        }
        first = false;
    }
    Ok(injected.iter().sum())
}

/// Synthetic injection in the untimed window: prompt ctx−1+1 tokens, slots for all
/// of them, ctx−1 computed on synthetic KV, blocks registered (§1.10).
pub(super) fn fake_injection(
    injected: &[u64],
    rank: u32,
    (salt, content): (SlotName<'_>, SlotName<'_>),
    req: SlotName<'_>,
    vocab: u64,
) -> Vec<PlanOp> {
    let mut ops = Vec::new();
    for (slot, &len) in injected.iter().enumerate() {
        let r = req(rank, slot);
        let prompt = Tokens::Salted {
            salt: content(rank, slot),
            len: len + 1,
            vocab,
        };
        ops.push(PlanOp::AddRequest {
            req: r.clone(),
            prompt,
            cache_salt: Some(salt(rank, slot)),
        });
        ops.push(PlanOp::Schedule {
            req: r.clone(),
            num_new_tokens: len + 1,
            use_prefix_cache: true,
            full_sequence_must_fit: true,
            delay_cache_blocks: true,
            expect: Default::default(),
        });
        ops.push(PlanOp::FakeCompute {
            req: r.clone(),
            tokens: len,
        });
        ops.push(PlanOp::CacheBlocks {
            req: r,
            num_tokens: len,
        });
    }
    ops
}

/// One timed decode step of every request of the execution.
pub(super) fn decode_step(
    batch: usize,
    rank: u32,
    point: u64,
    (step, vocab): (u64, u64),
    admission: bool,
    schedule: bool,
    req: SlotName<'_>,
) -> Vec<PlanOp> {
    let mut ops = Vec::new();
    if admission {
        ops.push(PlanOp::InjectPoint { point, replica: false });
    }
    if schedule {
        for slot in 0..batch {
            ops.push(PlanOp::Schedule {
                req: req(rank, slot),
                num_new_tokens: 1,
                use_prefix_cache: true,
                full_sequence_must_fit: false,
                delay_cache_blocks: true,
                expect: Default::default(),
            });
        }
    }
    ops.push(PlanOp::BeginTimed { point });
    let entries = (0..batch)
        .map(|slot| {
            let r = req(rank, slot);
            let output = vec![sampled(&r, 1 + step, vocab)];
            BatchEntry {
                req: r,
                tokens: 1,
                output,
            }
        })
        .collect();
    ops.push(PlanOp::Forward { batch: entries });
    ops.push(PlanOp::EndTimed { point });
    ops.push(PlanOp::ProcessOutputs { lag: 0 });
    ops
}

/// The point's last timed step retires its requests behind the fence right after the
/// forward, and its outputs are processed one step later (async scheduling's batch queue):
/// `ops`' closing `process_outputs` becomes the retirement and a `process_outputs` of lag 1.
pub(super) fn retire_in_flight(ops: &mut Vec<PlanOp>, batch: usize, rank: u32, req: &dyn Fn(u32, usize) -> String) {
    if matches!(ops.last(), Some(PlanOp::ProcessOutputs { .. })) {
        ops.pop();
    }
    ops.extend((0..batch).map(|slot| PlanOp::Finish {
        req: req(rank, slot),
        fenced: true,
    }));
    ops.push(PlanOp::ProcessOutputs { lag: 1 });
}

/// A prefix-cache reset requested after the timed window closes, while the point's requests
/// hold their blocks: refused (what it returns is the model's to say, not the plan's).
pub(super) fn reset_probe(ops: &mut Vec<PlanOp>) {
    let at = ops
        .iter()
        .position(|o| matches!(o, PlanOp::EndTimed { .. }))
        .map_or(ops.len(), |i| i + 1);
    ops.insert(at, PlanOp::ResetPrefixCache { expect: None });
}

/// Retire the execution's requests through the fence and drain it.
pub(super) fn retire(batch: usize, rank: u32, req: &dyn Fn(u32, usize) -> String) -> Vec<PlanOp> {
    let mut ops: Vec<PlanOp> = (0..batch)
        .map(|slot| PlanOp::Finish {
            req: req(rank, slot),
            fenced: true,
        })
        .collect();
    ops.push(PlanOp::ProcessOutputs { lag: 0 });
    ops
}
