//! A prefix stage (§3.3, §3.4, §3.7): a rung's chains built, parked and shed.

use super::ids::{chain_id, chain_salt, chain_tokens};
use super::live::Live;
use super::registration::shadow_tail_blocks;
use crate::bugs::BugMutant;
use crate::fpm::capacity::LayoutNeed;
use crate::fpm::sweep::ops::sampled;
use crate::fpm::sweep::{StageRecord, SweepBuilder};
use crate::kv::GroupKind;
use crate::plan::{BatchEntry, Expect, FaultSpec, PlanOp, Tokens};

/// `_kvwarm_start_stage` + `_kvwarm_monitor_build` (§3.3, §3.4): add B chains of
/// `depth` tokens, chunk-prefill them through the normal scheduler (each admission
/// hits the previous generation's cached blocks), then wait until every chain has
/// computed its prompt and has no output placeholder in flight (parked).
/// `Ok(group verdict)` once parked (§7.3: under attention DP the rung's worst-case
/// shadow tails must fit every rank's free pool with the fleet parked, invariant
/// 35); `Err(added)` when the soft deadline was seen before or during the build: no
/// stage starts or continues after it (§3.3 step 4; §8.1 invariant 36); the
/// caller sheds the chains added so far.
pub(super) fn build_stage(
    p: &mut SweepBuilder<'_>,
    generation: u64,
    batch: usize,
    depth: u64,
    first_point: u64,
) -> Result<bool, bool> {
    let s = p.s;
    let first_step = p.next_step;
    let mut added = false;
    let mut computed_tokens = 0u64;
    let build = StageBuild::new(p, generation, batch, depth);
    // Under attention DP a rank whose pool cannot take its fleet fails its stage
    // locally: it stops building, sheds its chains at once, and idles until every
    // rank is done (V-E stage round, §7.3; invariant 34).
    let mut local: Vec<Local> = vec![Local::Building; s.scenario.dp_ranks as usize];
    let ignore_placeholders = p.bug(BugMutant::ReadyBeforePlaceholders);
    let ignore_deadline = p.bug(BugMutant::StageBuildIgnoresDeadline);
    let stage = |steps, soft_timeout, group_fallback| StageRecord {
        rank: 0,
        benchmark_id: first_point,
        batch: batch as u64,
        depth,
        steps,
        soft_timeout,
        group_fallback,
    };
    // Chains that never stop on their own: Dynamo's max_tokens=100_000 with
    // ignore_eos; kvsim's chains produce one sampled token and are never decoded.
    for _ in 0..100_000 {
        if added && fleet_parked(p, &build, &local, ignore_placeholders) {
            break;
        }
        // §8.2 bug 5: the deadline is seen (and recorded) but the build goes on.
        if p.deadline_observed() && !ignore_deadline {
            if added {
                p.record_stage(stage(p.next_step - first_step, true, false), computed_tokens);
            }
            return Err(added);
        }
        let first = !added;
        let mut step_tokens = 0u64;
        p.step_live(|rank, live| {
            let tokens = build.rank_step(rank, live, first, &mut local[rank as usize]);
            if rank == 0 {
                step_tokens = tokens;
            }
        });
        computed_tokens += step_tokens;
        added = true;
    }
    let steps = p.next_step - first_step;
    let verdict = group_verdict(p, &local, batch);
    p.record_stage(stage(steps, false, !verdict), computed_tokens);
    Ok(verdict)
}

/// A rank's part in a stage under attention DP.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Local {
    Building,
    /// Failed locally this step; its chains are shed in the next.
    Failed,
    Shed,
}

/// What one rank's build step of a stage works from.
struct StageBuild {
    generation: u64,
    batch: usize,
    depth: u64,
    vocab: u64,
    /// The step's token budget (`max_num_batched_tokens`).
    budget: u64,
    /// Align-mode state groups: chunks end on block boundaries.
    align: bool,
    block: u64,
    /// Whether a chain's admission may be refused: a rank's pool smaller than its
    /// peers' (attention DP), or a pool that shrank mid-run. The probe clones the
    /// engine, so a fault-free single-rank build does without it.
    probe: bool,
}

impl StageBuild {
    fn new(p: &SweepBuilder<'_>, generation: u64, batch: usize, depth: u64) -> StageBuild {
        let s = p.s;
        let align = s
            .scenario
            .kv_config()
            .groups
            .iter()
            .any(|g| matches!(g.kind, GroupKind::Mamba { .. }));
        StageBuild {
            generation,
            batch,
            depth,
            vocab: s.scenario.model.vocab_size,
            budget: s.scenario.scheduler.max_num_batched_tokens,
            align,
            block: s.scenario.kv_config().scheduler_block_size(),
            probe: p.attention_dp() || p.faults.iter().any(|f| matches!(f, FaultSpec::ShrinkPool { .. })),
        }
    }

    /// One rank's ops of a build step; returns the prefill tokens it forwards.
    fn rank_step(&self, rank: u32, live: &mut Live<'_>, first: bool, local: &mut Local) -> u64 {
        if first {
            for i in 0..self.batch {
                live.op(PlanOp::AddRequest {
                    req: chain_id(self.generation, rank, i),
                    prompt: chain_tokens(rank, i, self.depth, self.vocab),
                    cache_salt: Some(chain_salt(rank, i)),
                });
            }
        }
        match *local {
            Local::Building => {}
            Local::Failed => {
                // The local failure is shed on this rank at once.
                for i in 0..self.batch {
                    live.op(PlanOp::Shed {
                        req: chain_id(self.generation, rank, i),
                        fenced: true,
                    });
                }
                live.op(PlanOp::ProcessOutputs { lag: 0 });
                *local = Local::Shed;
                return 0;
            }
            Local::Shed => return 0,
        }
        let fwd = self.prefill_chunks(rank, live, local);
        let tokens = fwd.iter().map(|b| b.tokens).sum();
        if !fwd.is_empty() {
            live.op(PlanOp::Forward { batch: fwd });
        }
        live.op(PlanOp::ProcessOutputs { lag: 0 });
        tokens
    }

    /// Schedule the next prefill chunk of each unfinished chain within the step's
    /// budget; a chain the pool refuses fails the rank's stage locally.
    fn prefill_chunks(&self, rank: u32, live: &mut Live<'_>, local: &mut Local) -> Vec<BatchEntry> {
        let depth = self.depth;
        let mut left = self.budget;
        let mut fwd = Vec::new();
        for i in 0..self.batch {
            if left == 0 {
                break;
            }
            let id = chain_id(self.generation, rank, i);
            let r = &live.e.requests[&id].req;
            if r.num_computed_tokens >= depth {
                continue;
            }
            let admitting = r.num_computed_tokens == 0 && r.status != crate::kv::RequestStatus::Running;
            let hit = if admitting {
                live.e.kv.get_computed_blocks(r).num_computed_tokens
            } else {
                0
            };
            let mut n = (depth - r.num_computed_tokens - hit).min(left);
            if self.align && r.num_computed_tokens + hit + n < depth {
                // Align-mode state groups: chunks end on block boundaries, as
                // vLLM's scheduler splits them (as the native prefill does).
                n = n / self.block * self.block;
                if n == 0 {
                    break;
                }
            }
            let op = PlanOp::Schedule {
                req: id.clone(),
                num_new_tokens: n,
                use_prefix_cache: true,
                full_sequence_must_fit: admitting,
                delay_cache_blocks: false,
                expect: Expect {
                    hit_tokens: admitting.then_some(hit),
                    ..Default::default()
                },
            };
            if self.probe && !matches!(live.e.clone().apply(&op), Ok(o) if o.violations.is_empty()) {
                // The pool refuses the chain on this rank: a local stage failure.
                *local = Local::Failed;
                break;
            }
            live.op(op);
            left -= n;
            let completes = live.e.requests[&id].req.num_computed_tokens + n >= depth;
            let output = if completes {
                vec![sampled(&id, 0, self.vocab)]
            } else {
                vec![]
            };
            fwd.push(BatchEntry {
                req: id,
                tokens: n,
                output,
            });
        }
        fwd
    }
}

/// Whether every still-building rank's chains have computed their prompt with no
/// output in flight (§8.2 bug 7 counts a chain ready before its output landed).
fn fleet_parked(p: &SweepBuilder<'_>, build: &StageBuild, local: &[Local], ignore_placeholders: bool) -> bool {
    (0..p.s.scenario.dp_ranks).all(|rank| {
        let e = p.engine(rank);
        local[rank as usize] != Local::Building
            || (0..build.batch).all(|i| {
                let r = &e.requests[&chain_id(build.generation, rank, i)].req;
                r.num_computed_tokens >= build.depth && (r.num_output_placeholders == 0 || ignore_placeholders)
            })
    })
}

/// §7.3 (last bullet), invariant 35: each rank's local verdict is whether the
/// rung's worst-case shadow tails fit its free pool with the fleet parked; the
/// group verdict is the AND, the same on every rank.
fn group_verdict(p: &SweepBuilder<'_>, local: &[Local], batch: usize) -> bool {
    let s = p.s;
    let built = local.iter().all(|l| *l == Local::Building);
    built
        && (!p.attention_dp() || {
            let need = LayoutNeed::new(s.scenario.kv_config());
            let tails = shadow_tail_blocks(&need, s.bench.giant_kv_repeats) * batch as u64;
            (0..s.scenario.dp_ranks).all(|rank| p.engine(rank).kv.pool.num_free_blocks() as u64 >= tails)
        })
}

/// `_kvwarm_shed_chains` (§3.7): retire every chain through `finish_requests`
/// (fenced), then drain the fence before anything draws from the pool again.
/// Chains a rank already shed after a local failure are not shed twice.
pub(super) fn shed_chains(p: &mut SweepBuilder<'_>, generation: u64, batch: usize) {
    let drain = !p.bug(BugMutant::NoIdleBeforeDraw);
    p.step_live(|rank, live| {
        for i in 0..batch {
            let id = chain_id(generation, rank, i);
            if live.e.requests.contains_key(&id) {
                live.op(PlanOp::Shed { req: id, fenced: true });
            }
        }
        if drain {
            live.op(PlanOp::ProcessOutputs { lag: 0 });
        }
    });
}

/// Chains still waiting (never scheduled), per rank, with their prompts.
pub(super) fn waiting_chains(
    p: &SweepBuilder<'_>,
    generation: u64,
    batch: usize,
) -> Vec<Vec<(String, Tokens, String)>> {
    let vocab = p.s.scenario.model.vocab_size;
    (0..p.s.scenario.dp_ranks)
        .map(|rank| {
            (0..batch)
                .filter(|&i| {
                    let id = chain_id(generation, rank, i);
                    p.engine(rank)
                        .requests
                        .get(&id)
                        .is_some_and(|r| r.req.status != crate::kv::RequestStatus::Running)
                })
                .map(|i| {
                    let depth = p.engine(rank).requests[&chain_id(generation, rank, i)].req.num_tokens();
                    (
                        chain_id(generation, rank, i),
                        chain_tokens(rank, i, depth, vocab),
                        chain_salt(rank, i),
                    )
                })
                .collect()
        })
        .collect()
}

/// §8.2 bug 2: a chain shed by hand while still waiting stays in the scheduler's
/// waiting queue, which admits it again.
pub(super) fn readmit(p: &mut SweepBuilder<'_>, waiting: Vec<Vec<(String, Tokens, String)>>) {
    p.step_live(|rank, live| {
        for (id, prompt, salt) in &waiting[rank as usize] {
            live.op(PlanOp::AddRequest {
                req: id.clone(),
                prompt: prompt.clone(),
                cache_salt: Some(salt.clone()),
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::ids::{chain_id, chain_salt, chain_tokens};
    use super::{build_stage, waiting_chains};
    use crate::engine::Engine;
    use crate::fpm::capacity::LayoutNeed;
    use crate::fpm::gate::gate;
    use crate::fpm::grid::build_grid;
    use crate::fpm::scenarios::{find_scenario, BuiltinScenario};
    use crate::fpm::sweep::{sweep_meta, SweepBuilder, SweepOptions};
    use crate::kv::RequestStatus;

    /// A chain planner of `s` at step 0 with its engines (one rank).
    fn planner<'a>(s: &'a BuiltinScenario, opts: &SweepOptions) -> SweepBuilder<'a> {
        let cfg = s.grid_config();
        let grid = build_grid(&cfg, &LayoutNeed::new(s.scenario.kv_config())).unwrap();
        let usable = cfg.capacity.usable_blocks_with_watermark;
        let meta = sweep_meta(s, None, &gate(s), None, &grid, usable, opts);
        let mut p = SweepBuilder::new(s, meta, opts);
        p.engines = Some(vec![Engine::new(&s.scenario, 0).unwrap()]);
        p
    }

    #[test]
    fn a_build_cut_by_the_deadline_leaves_the_unscheduled_chains_waiting() {
        let s = find_scenario("llama31-8b").unwrap();
        assert_eq!(
            (s.scenario.dp_ranks, s.scenario.scheduler.max_num_batched_tokens),
            (1, 2048)
        );
        let mut p = planner(&s, &SweepOptions::default());
        // The deadline passes with the first build step, whose token budget chain 0's
        // first chunk uses up.
        p.deadline_ns = Some(1);
        let (batch, depth) = (3, 3000);
        assert_eq!(build_stage(&mut p, 1, batch, depth, 0), Err(true));
        let chain0 = &p.engine(0).requests[&chain_id(1, 0, 0)].req;
        assert_eq!(
            (chain0.status, chain0.num_computed_tokens),
            (RequestStatus::Running, 2048)
        );
        let vocab = s.scenario.model.vocab_size;
        let waiting: Vec<_> = (1..batch)
            .map(|i| (chain_id(1, 0, i), chain_tokens(0, i, depth, vocab), chain_salt(0, i)))
            .collect();
        assert_eq!(waiting_chains(&p, 1, batch), [waiting]);
    }
}
