//! Shared-prefix chains with shadows (dynamo_fpm.md §3; seed 001, FPM model II).
//!
//! Per batch rung B the planner builds B chains (real prefills of salted content,
//! stable per (rank, chain index), so a deeper generation hits the previous one in
//! the prefix cache and computes only the extension), parks them, and measures
//! every covered point of the rung on shadows that borrow the chains' full blocks
//! and own a private tail (§2.3, §3.5, §3.6). The planner drives one engine per
//! rank online: every op is applied as it is built, so the tail block ids it
//! records are the ones the pool hands out.

use super::ops::{decode_step, retire};
use super::{
    plan_execution, prompt_sha256, variance, CapacityFallback, ExecutionRecord, Kv, Planner, PromptEvidence,
    StageRecord, SweepError,
};
use crate::bugs::BugMutant;
use crate::engine::{Engine, Mismatch};
use crate::fpm::capacity::LayoutNeed;
use crate::fpm::grid::{
    decode_admission, decode_step_plan, BenchmarkPoint, BlockNeed, BlockNeedQuery, DecodeAdmission, DecodeStepInput,
    GiantKvPolicy, Grid, GridConfig, PointKey, PointType, SampleReason,
};
use crate::kv::{GroupKind, NULL_BLOCK};
use crate::plan::{BatchEntry, Expect, FaultSpec, PlanOp, ShadowGroup, TailMode, Tokens};

/// Apply one op the planner built to its own engine; a refusal or a planner
/// violation means the planner is wrong (a mutated, `lenient` planner records
/// the violation's op and goes on: the executor is the judge).
pub(super) fn apply_checked(e: &mut Engine, op: &PlanOp, lenient: bool) -> Result<(), Mismatch> {
    let out = e.apply(op)?;
    match out.violations.first() {
        Some(v) if !lenient => Err(Mismatch(format!("{}: {}", v.id, v.detail))),
        _ => Ok(()),
    }
}

/// One rank's ops of a step, applied to the rank's engine as they are built.
struct Live<'a> {
    e: &'a mut Engine,
    ops: Vec<PlanOp>,
    error: Option<String>,
    lenient: bool,
}

impl Live<'_> {
    fn op(&mut self, op: PlanOp) {
        if self.error.is_none() {
            if let Err(m) = apply_checked(self.e, &op, self.lenient) {
                self.error = Some(m.0);
            }
        }
        self.ops.push(op);
    }
}

impl Planner<'_> {
    /// A lock-step step whose ops depend on the live engine state.
    fn step_live(&mut self, mut build: impl FnMut(u32, &mut Live<'_>)) -> u64 {
        let step = self.next_step;
        let mut engines = self.engines.take().expect("chain planning drives engines");
        let lenient = self.lenient();
        for rank in 0..self.s.scenario.dp_ranks {
            let e = &mut engines[rank as usize];
            e.begin_step();
            for f in &self.faults {
                e.apply_fault(f, step);
            }
            let mut live = Live {
                e,
                ops: Vec::new(),
                error: None,
                lenient,
            };
            build(rank, &mut live);
            if let Some(m) = live.error {
                self.error.get_or_insert(format!("step {step} rank {rank}: {m}"));
            }
            self.pending_tokens += crate::plan::forward_tokens(&live.ops);
            self.steps.push(crate::plan::Step {
                step,
                rank,
                ops: live.ops,
            });
        }
        self.engines = Some(engines);
        self.end_step();
        step
    }

    fn engine(&self, rank: u32) -> &Engine {
        &self.engines.as_ref().expect("chain planning drives engines")[rank as usize]
    }

    /// `_bench_frees_pending()` idle steps (§3.7; §8.2 bug 14): before anything
    /// draws from the pool again, idle while any rank still owes fenced frees
    /// (outputs in flight). The mutant of bug 14 does not wait.
    pub(super) fn drain_fence(&mut self) {
        if self.bug(BugMutant::NoIdleBeforeDraw) {
            return;
        }
        for _ in 0..64 {
            let owed = self
                .engines
                .as_ref()
                .is_some_and(|es| es.iter().any(|e| !e.deferred.is_empty()));
            if !owed {
                return;
            }
            self.step_live(|_, live| live.op(PlanOp::ProcessOutputs { lag: 0 }));
        }
    }

    /// The smallest free pool over ranks (chain planning).
    fn min_free(&self) -> u64 {
        self.engines.as_ref().map_or(0, |es| {
            es.iter().map(|e| e.kv.pool.num_free_blocks() as u64).min().unwrap_or(0)
        })
    }
}

fn chain_salt(rank: u32, i: usize) -> String {
    format!("chain:dp{rank}:c{i}")
}

fn chain_tokens(rank: u32, i: usize, len: u64, vocab: u64) -> Tokens {
    Tokens::Salted {
        salt: chain_salt(rank, i),
        len,
        vocab,
    }
}

/// `_kvwarm_shadow_tail_blocks(repeats)` (§2.3): worst case per request, with
/// `h = max(2, repeats)`, Σ over groups of `1 + ceil(h / bs)` (positional groups).
/// Random-state (Mamba/KDA, random KDA on) groups count `1 + ceil((h + 1) / bs)`:
/// their private span starts one block lower (`recurrent_shadow_range`).
pub fn shadow_tail_blocks(need: &LayoutNeed, repeats: u64) -> u64 {
    let h = repeats.max(2);
    need.config
        .groups
        .iter()
        .map(|g| {
            let x = u64::from(matches!(g.kind, GroupKind::Mamba { .. }));
            1 + (h + x).div_ceil(g.block_size)
        })
        .sum()
}

/// `recurrent_shadow_range(ctx, headroom, bs)` (§2.3): the private state span
/// `[first, end)` of a random-state group.
pub fn recurrent_shadow_range(ctx: u64, headroom: u64, bs: u64) -> (u64, u64) {
    (ctx.saturating_sub(1) / bs, (ctx + 1 + headroom).div_ceil(bs))
}

/// Build the `register_shadow` op for `shadow` borrowing `chain` at `ctx` with
/// `headroom` steady writes, from the engine's current state (§2.3, §3.6). All or
/// nothing: every group's span and the pool shortfall are checked before anything
/// is decided; a shortfall (or a chain too shallow) gives a failed op with no
/// groups, which leaves the pool exactly as it was. The tail ids are the ones the
/// pool hands out next (`get_new_blocks` pops the free queue's front; shared and
/// CoW-source blocks are the chain's, so referencing them moves nothing).
pub fn shadow_registration(e: &Engine, shadow: &str, chain: &str, ctx: u64, headroom: u64, covered: bool) -> PlanOp {
    shadow_registration_with(e, shadow, chain, ctx, headroom, covered, false)
}

/// `shadow_registration`; with `random_state` (random KDA, §3, invariant 49)
/// Mamba/KDA groups get a private span over `recurrent_shadow_range` with null
/// placeholders below it, borrowing nothing from the chain.
pub fn shadow_registration_with(
    e: &Engine,
    shadow: &str,
    chain: &str,
    ctx: u64,
    headroom: u64,
    covered: bool,
    random_state: bool,
) -> PlanOp {
    registration_op(e, (shadow, chain), ctx, headroom, (covered, random_state), None)
}

/// `shadow_registration_with`, with a seed-bug mutant of the registration code.
fn registration_op(
    e: &Engine,
    (shadow, chain): (&str, &str),
    ctx: u64,
    headroom: u64,
    (covered, random_state): (bool, bool),
    mutant: Option<BugMutant>,
) -> PlanOp {
    let failed = || PlanOp::RegisterShadow {
        shadow: shadow.to_string(),
        chain: chain.to_string(),
        ctx,
        headroom,
        tail: TailMode::Zero,
        groups: Vec::new(),
        ok: false,
        covered,
        random_state,
    };
    if e.registration_fails_next() {
        // A local stage failure (`stage_failure` fault) is coming: report it.
        return failed();
    }
    let Some(c) = e.requests.get(chain) else {
        return failed();
    };
    let tables = e.kv.get_block_ids(c.req.id);
    // Phase 1: every group's span, before anything is drawn.
    let mut spans = Vec::new();
    for (g, grp) in e.kv.config.groups.iter().enumerate() {
        if random_state && matches!(grp.kind, GroupKind::Mamba { .. }) {
            let (first, end) = recurrent_shadow_range(ctx, headroom, grp.block_size);
            spans.push((vec![NULL_BLOCK; first as usize], (end - first) as usize, None));
            continue;
        }
        if mutant == Some(BugMutant::RecurrentStateBorrowed) && matches!(grp.kind, GroupKind::Mamba { .. }) {
            // §8.2 bug 8: the state slot is a fresh block, not the chain's state at ctx.
            let (first, end) = recurrent_shadow_range(ctx, headroom, grp.block_size);
            let shared = tables[g].iter().copied().take(first as usize).collect::<Vec<_>>();
            let fresh = end as usize - shared.len();
            spans.push((shared, fresh, None));
            continue;
        }
        if !matches!(grp.kind, GroupKind::FullAttention | GroupKind::Mla) {
            // DECISION: only positional full-attention/MLA groups are borrowed (the
            // chain gate rejects state layers; windows are not chain-eligible here).
            return failed();
        }
        let bs = grp.block_size;
        let n_shared = (ctx / bs) as usize;
        let n_total = (ctx + 1 + headroom).div_ceil(bs) as usize;
        if n_total > tables[g].len() {
            // "chain … too shallow for shadow …" (§3.6; §8.2 bug 6).
            return failed();
        }
        if mutant == Some(BugMutant::ZeroAllocBorrow) {
            // §8.2 bug 9: the chain's table borrowed read-only, no private tail.
            spans.push((tables[g][..n_total].to_vec(), 0, None));
            continue;
        }
        let cow_from = (!ctx.is_multiple_of(bs)).then(|| tables[g][n_shared]);
        spans.push((tables[g][..n_shared].to_vec(), n_total - n_shared, cow_from));
    }
    let total: usize = spans.iter().map(|s| s.1).sum();
    let free = e.kv.pool.num_free_blocks();
    if total > free && mutant == Some(BugMutant::RegistrationNotAtomic) {
        // §8.2 bug 1: groups registered one by one until the pool runs dry; the
        // failure leaves the earlier groups behind.
        let mut fresh = e.kv.pool.free_queue().take(free);
        let mut left = free;
        let mut groups = Vec::new();
        for (shared, n, cow_from) in spans {
            if n > left {
                break;
            }
            left -= n;
            groups.push(ShadowGroup {
                shared,
                tail: fresh.by_ref().take(n).collect(),
                cow_from,
                cow_more: Vec::new(),
                num_cached: None,
            });
        }
        return PlanOp::RegisterShadow {
            shadow: shadow.to_string(),
            chain: chain.to_string(),
            ctx,
            headroom,
            tail: TailMode::Zero,
            groups,
            ok: false,
            covered,
            random_state,
        };
    }
    if total > free {
        // `_kvwarm_shadow_pool_shortfall` > 0 (§3.5 step 2): register nothing.
        return failed();
    }
    let mut fresh = e.kv.pool.free_queue().take(total);
    let groups: Vec<ShadowGroup> = spans
        .into_iter()
        .map(|(shared, n, cow_from)| ShadowGroup {
            shared,
            tail: fresh.by_ref().take(n).collect(),
            cow_from,
            cow_more: Vec::new(),
            num_cached: None,
        })
        .collect();
    let tail = if groups.iter().any(|g| g.cow_from.is_some()) {
        TailMode::Cow
    } else {
        TailMode::Zero
    };
    PlanOp::RegisterShadow {
        shadow: shadow.to_string(),
        chain: chain.to_string(),
        ctx,
        headroom,
        tail,
        groups,
        ok: true,
        covered,
        random_state,
    }
}

/// One decode point with its admission and whether the rung plan covers it.
struct Point {
    key: PointKey,
    point: BenchmarkPoint,
    adm: DecodeAdmission,
    covered: bool,
}

/// The whole chain sweep: covered points rung by rung (chains built, parked,
/// borrowed), then the uncovered ones on synthetic KV (§3.1 reorder #2).
pub(super) fn plan_chain_sweep(
    p: &mut Planner<'_>,
    grid: &Grid,
    cfg: &GridConfig,
    need: &LayoutNeed,
) -> Result<(), SweepError> {
    let s = p.s;
    let engines = (0..s.scenario.dp_ranks)
        .map(|r| Engine::new(&s.scenario, r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|m| SweepError(m.0))?;
    p.engines = Some(engines);
    let repeats = s.bench.giant_kv_repeats;
    // §3.1 step 3 / §8.2 bug 6: margin = point need = 1 + repeats for every point
    // (repeats floored at 1).
    // §8.2 bug 6: a single steady step's margin for every point.
    let point_need = if p.bug(BugMutant::MarginSingleSteadyStep) {
        2
    } else {
        1 + repeats.max(1)
    };
    let depth_cap = s.scenario.scheduler.max_model_len.saturating_sub(4);
    // §8.2 bug 1: feasibility charged only the resident chain blocks.
    let tail = if p.bug(BugMutant::ShadowTailNotReserved) {
        0
    } else {
        shadow_tail_blocks(need, repeats)
    };
    let slot_budget = !p.bug(BugMutant::RungSlotBudget);
    let blocks = |depth: u64| {
        need.blocks_per_req(BlockNeedQuery {
            num_tokens: depth,
            has_cache_hit: false,
            apply_admission_cap: true,
        })
    };
    let mut points = Vec::new();
    for entry in grid.entries.iter().filter(|e| e.point.point_type == PointType::Decode) {
        let adm = decode_admission(entry.point.batch_size, entry.point.total_kv_read_tokens)
            .map_err(|e| SweepError(e.to_string()))?;
        points.push(Point {
            key: entry.key.clone(),
            point: entry.point.clone(),
            adm,
            covered: false,
        });
    }
    // Rung depths (§3.1 steps 3–4): want = min(max injected + margin, cap); the
    // depth is trimmed until B chains plus B shadow tails fit the usable pool.
    let mut rungs: Vec<(u64, u64)> = Vec::new();
    for pt in &points {
        let want = (pt.adm.injected_lengths.iter().copied().max().unwrap_or(1) + point_need).min(depth_cap);
        match rungs.iter_mut().find(|(b, _)| *b == pt.point.batch_size) {
            Some((_, d)) => *d = (*d).max(want),
            None => rungs.push((pt.point.batch_size, want)),
        }
    }
    let max_running = u64::from(s.scenario.scheduler.max_num_seqs);
    let attention_dp = p.attention_dp();
    for (b, depth) in rungs.iter_mut() {
        let mut usable = cfg.grid_usable_blocks(*b, true);
        if attention_dp {
            // §7.4: the plan trim keeps an 85 % pool margin under attention DP.
            // DECISION: part II's single-rank trim keeps the whole usable pool.
            usable = usable * 85 / 100;
        }
        let fits = |d: u64| (blocks(d) + tail) * *b <= usable;
        if slot_budget && 2 * *b > max_running {
            // V-E slot budget (§3.1 step 4; §8.2 bug 25): B parked chains and B
            // shadows must fit max_num_running_reqs; the rung is dropped.
            *depth = 0;
        } else if !fits(*depth) {
            // DECISION: the trim loop's result computed by bisection (footprints
            // grow with depth); below depth 8 the rung falls back (V-C).
            let (mut lo, mut hi) = (8u64, *depth);
            if !fits(lo) {
                *depth = 0;
            } else {
                while lo < hi {
                    let mid = lo + (hi - lo).div_ceil(2);
                    if fits(mid) {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                *depth = lo;
            }
        }
    }
    let depth_of = |b: u64| rungs.iter().find(|(x, _)| *x == b).map_or(0, |r| r.1);
    let mut dropped = Vec::new();
    for pt in &mut points {
        let depth = depth_of(pt.point.batch_size);
        let max_inj = pt.adm.injected_lengths.iter().copied().max().unwrap_or(1);
        // `_kvwarm_plan_covers` (§3.1).
        pt.covered = depth > 0 && max_inj + point_need <= depth;
        if !pt.covered {
            let b = pt.point.batch_size;
            let want = (max_inj + point_need).min(depth_cap);
            let usable = cfg.grid_usable_blocks(b, true);
            let required = (blocks(want) + tail) * b;
            let fallback = CapacityFallback {
                benchmark_id: Some(pt.point.benchmark_id),
                batch: b,
                depth: want,
                required_blocks: required,
                usable_blocks: usable,
                total_kv_read_tokens: pt.point.total_kv_read_tokens,
            };
            if attention_dp {
                dropped.push((pt.key.clone(), fallback));
            } else if required > usable {
                p.meta.capacity_fallbacks.push(fallback);
            }
        }
    }
    if attention_dp {
        // §7.4: attention-DP grids are real-KV only; the rest is renumbered.
        let g = super::dp::drop_uncovered(p, grid, dropped);
        points.retain(|pt| pt.covered);
        for pt in &mut points {
            pt.point.benchmark_id = g.find(&pt.key).expect("kept").point.benchmark_id;
        }
    }
    // Reorder #2 (§3.1 step 6): covered points first, then the fake ones, each in
    // grid order; fake injection would evict the chains' cached blocks.
    let mut stage: Option<(u64, u64)> = None; // (batch, generation)
    let mut generation = 0u64;
    // A rung the group verdict failed at stage close (§7.3), and points that fell
    // back after a local failure on a single rank (measured on synthetic KV later).
    let mut failed_rung: Option<u64> = None;
    let mut demoted: Vec<u64> = Vec::new();
    for pt in points.iter().filter(|p| p.covered) {
        if p.stop_before_point() {
            break;
        }
        let b = pt.point.batch_size;
        if failed_rung == Some(b) {
            if attention_dp {
                p.skip_point(pt.point.benchmark_id, STAGE_FAILED_UNDER_DP);
            } else {
                demoted.push(pt.point.benchmark_id);
            }
            continue;
        }
        if stage.map(|s| s.0) != Some(b) {
            if let Some((ob, g)) = stage.take() {
                shed_chains(p, g, ob as usize);
            }
            p.drain_fence();
            generation += 1;
            match build_stage(p, generation, b as usize, depth_of(b), pt.point.benchmark_id) {
                Err(added) => {
                    // Abandoned at the soft deadline (§1.12, §8.2 bug 5): shed, stop.
                    if added {
                        let waiting = waiting_chains(p, generation, b as usize);
                        shed_chains(p, generation, b as usize);
                        if p.bug(BugMutant::ShedWithoutFinish) {
                            readmit(p, waiting);
                        }
                    }
                    break;
                }
                Ok(false) => {
                    // The group failed the stage: every rank sheds its fleet and the
                    // rung's points are skipped on every rank (§7.3 group_fallback, §7.4);
                    // a single rank measures them on synthetic KV later.
                    shed_chains(p, generation, b as usize);
                    failed_rung = Some(b);
                    if attention_dp {
                        p.skip_point(pt.point.benchmark_id, STAGE_FAILED_UNDER_DP);
                    } else {
                        demoted.push(pt.point.benchmark_id);
                    }
                    continue;
                }
                Ok(true) => stage = Some((b, generation)),
            }
        }
        let (_, g) = stage.expect("a stage is active");
        if !plan_shadow_execution(p, pt, g)? {
            if attention_dp {
                p.skip_point(pt.point.benchmark_id, STAGE_FAILED_UNDER_DP);
            } else {
                demoted.push(pt.point.benchmark_id);
            }
        }
    }
    // Chains are shed before a fake-fallback point and at the end (§3.3, §3.7).
    if let Some((ob, g)) = stage.take() {
        shed_chains(p, g, ob as usize);
    }
    p.drain_fence();
    let usable = cfg.capacity.usable_blocks_with_watermark;
    for pt in points
        .iter()
        .filter(|p| !p.covered || demoted.contains(&p.point.benchmark_id))
    {
        if p.stop_before_point() {
            break;
        }
        let steps = decode_step_plan(
            DecodeStepInput {
                kvwarm_enabled: true,
                kvwarm_real: false,
                total_kv_read_tokens: pt.point.total_kv_read_tokens,
                injected_lengths: &pt.adm.injected_lengths,
                max_model_len: s.scenario.scheduler.max_model_len,
                usable_blocks_with_watermark: usable,
            },
            GiantKvPolicy {
                threshold_tokens: s.bench.giant_kv_threshold,
                repeats,
            },
            need,
        );
        // DECISION (spec/plan.md §4): after a pool shrank mid-run (the `shrink_pool`
        // fault), a fake point that no longer fits some rank's free pool is skipped
        // on every rank with `pool_shortfall` instead of admitted.
        p.drain_fence();
        let fake_need = crate::fpm::capacity::native_footprint(need, &pt.adm.injected_lengths, steps.extra_steps);
        if fake_need > p.min_free() {
            p.skip_point(pt.point.benchmark_id, "pool_shortfall");
            continue;
        }
        let mut point = pt.point.clone();
        if pt.adm.context_clamped {
            point.total_kv_read_tokens = pt.adm.steady_kv_tokens;
            point.sample_reasons.push(SampleReason::ContextClamped);
        }
        point.sample_reasons.push(SampleReason::KvwarmFakeFallback);
        // §5.2 (V-E): a fake-fallback row under random KDA is `fake_attention_kv_random_kda`.
        let regime = if s.bench.random_kda {
            "fake_attention_kv_random_kda"
        } else {
            "fake_fallback"
        };
        plan_execution(
            p,
            point,
            regime.into(),
            Kv::Fake,
            &pt.adm.injected_lengths,
            steps.extra_steps,
        )?;
    }
    Ok(())
}

/// §7.4 skip reason: a point whose stage failed after planning, under attention DP.
const STAGE_FAILED_UNDER_DP: &str = "stage_failed_under_attention_dp";

fn chain_id(generation: u64, rank: u32, i: usize) -> String {
    format!("kvwarm_chain.g{generation}.dp{rank}.c{i}")
}

/// `_kvwarm_start_stage` + `_kvwarm_monitor_build` (§3.3, §3.4): add B chains of
/// `depth` tokens, chunk-prefill them through the normal scheduler (each admission
/// hits the previous generation's cached blocks), then wait until every chain has
/// computed its prompt and has no output placeholder in flight (parked).
/// `Ok(group verdict)` once parked (§7.3: under attention DP the rung's worst-case
/// shadow tails must fit every rank's free pool with the fleet parked, invariant
/// 35); `Err(added)` when the soft deadline was seen before or during the build: no
/// stage starts or continues after it (§3.3 step 4; §8.1 invariant 36); the
/// caller sheds the chains added so far.
fn build_stage(p: &mut Planner<'_>, generation: u64, batch: usize, depth: u64, first_point: u64) -> Result<bool, bool> {
    let s = p.s;
    let vocab = s.scenario.model.vocab_size;
    let budget = s.scenario.scheduler.max_num_batched_tokens;
    let first_step = p.next_step;
    let mut added = false;
    let mut computed_tokens = 0u64;
    let dp = p.attention_dp();
    let align = s
        .scenario
        .kv_config()
        .groups
        .iter()
        .any(|g| matches!(g.kind, GroupKind::Mamba { .. }));
    let block = s.scenario.kv_config().scheduler_block_size();
    // Under attention DP a rank whose pool cannot take its fleet fails its stage
    // locally: it stops building, sheds its chains at once, and idles until every
    // rank is done (V-E stage round, §7.3; invariant 34).
    let mut local: Vec<Local> = vec![Local::Building; s.scenario.dp_ranks as usize];
    let ignore_placeholders = p.bug(BugMutant::ReadyBeforePlaceholders);
    // Whether a chain's admission may be refused: a rank's pool smaller than its
    // peers' (attention DP), or a pool that shrank mid-run. The probe clones the
    // engine, so a fault-free single-rank build does without it.
    let probe = dp || p.faults.iter().any(|f| matches!(f, FaultSpec::ShrinkPool { .. }));
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
        let parked = added
            && (0..s.scenario.dp_ranks).all(|rank| {
                let e = p.engine(rank);
                local[rank as usize] != Local::Building
                    || (0..batch).all(|i| {
                        let r = &e.requests[&chain_id(generation, rank, i)].req;
                        // §8.2 bug 7 counts a chain ready before its output landed.
                        r.num_computed_tokens >= depth && (r.num_output_placeholders == 0 || ignore_placeholders)
                    })
            });
        if parked {
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
            if first {
                for i in 0..batch {
                    live.op(PlanOp::AddRequest {
                        req: chain_id(generation, rank, i),
                        prompt: chain_tokens(rank, i, depth, vocab),
                        cache_salt: Some(chain_salt(rank, i)),
                    });
                }
            }
            match local[rank as usize] {
                Local::Building => {}
                Local::Failed => {
                    // The local failure is shed on this rank at once.
                    for i in 0..batch {
                        live.op(PlanOp::Shed {
                            req: chain_id(generation, rank, i),
                            fenced: true,
                        });
                    }
                    live.op(PlanOp::ProcessOutputs { lag: 0 });
                    local[rank as usize] = Local::Shed;
                    return;
                }
                Local::Shed => return,
            }
            let mut left = budget;
            let mut fwd = Vec::new();
            for i in 0..batch {
                if left == 0 {
                    break;
                }
                let id = chain_id(generation, rank, i);
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
                if align && r.num_computed_tokens + hit + n < depth {
                    // Align-mode state groups: chunks end on block boundaries, as
                    // vLLM's scheduler splits them (as the native prefill does).
                    n = n / block * block;
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
                if probe && !matches!(live.e.clone().apply(&op), Ok(o) if o.violations.is_empty()) {
                    // The pool refuses the chain on this rank: a local stage failure.
                    local[rank as usize] = Local::Failed;
                    break;
                }
                live.op(op);
                left -= n;
                let completes = live.e.requests[&id].req.num_computed_tokens + n >= depth;
                fwd.push(BatchEntry {
                    req: id,
                    tokens: n,
                    output: if completes { vec![1] } else { vec![] },
                });
            }
            if rank == 0 {
                step_tokens = fwd.iter().map(|b| b.tokens).sum();
            }
            if !fwd.is_empty() {
                live.op(PlanOp::Forward { batch: fwd });
            }
            live.op(PlanOp::ProcessOutputs { lag: 0 });
        });
        computed_tokens += step_tokens;
        added = true;
    }
    let steps = p.next_step - first_step;
    // §7.3 (last bullet), invariant 35: each rank's local verdict is whether the
    // rung's worst-case shadow tails fit its free pool with the fleet parked; the
    // group verdict is the AND, the same on every rank.
    let built = local.iter().all(|l| *l == Local::Building);
    let verdict = built
        && (!dp || {
            let need = LayoutNeed::new(s.scenario.kv_config());
            let tails = shadow_tail_blocks(&need, s.bench.giant_kv_repeats) * batch as u64;
            (0..s.scenario.dp_ranks).all(|rank| p.engine(rank).kv.pool.num_free_blocks() as u64 >= tails)
        });
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

/// `_kvwarm_shed_chains` (§3.7): retire every chain through `finish_requests`
/// (fenced), then drain the fence before anything draws from the pool again.
/// Chains a rank already shed after a local failure are not shed twice.
fn shed_chains(p: &mut Planner<'_>, generation: u64, batch: usize) {
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
fn waiting_chains(p: &Planner<'_>, generation: u64, batch: usize) -> Vec<Vec<(String, Tokens, String)>> {
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
fn readmit(p: &mut Planner<'_>, waiting: Vec<Vec<(String, Tokens, String)>>) {
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

/// One covered point on shadows (§3.5, §1.10): register one shadow per request in
/// the untimed injection step, release the CoW retentions there, then the timed
/// admission and steady steps, then retire the shadows through the fence.
/// Returns false when a rank failed locally: the group verdict (AND over ranks,
/// taken before the point is injected) makes every rank retire the shadows it
/// registered and not measure the point (§7.3; §8.1 invariant 34).
fn plan_shadow_execution(p: &mut Planner<'_>, pt: &Point, generation: u64) -> Result<bool, SweepError> {
    let s = p.s;
    let id = pt.point.benchmark_id;
    let vocab = s.scenario.model.vocab_size;
    let injected = &pt.adm.injected_lengths;
    let need = LayoutNeed::new(s.scenario.kv_config());
    let steps = decode_step_plan(
        DecodeStepInput {
            kvwarm_enabled: true,
            kvwarm_real: true,
            total_kv_read_tokens: pt.point.total_kv_read_tokens,
            injected_lengths: injected,
            max_model_len: s.scenario.scheduler.max_model_len,
            usable_blocks_with_watermark: s.grid_config().capacity.usable_blocks_with_watermark,
        },
        GiantKvPolicy {
            threshold_tokens: s.bench.giant_kv_threshold,
            repeats: s.bench.giant_kv_repeats,
        },
        &need,
    );
    // `headroom = max(1, extra steps)` (§3.5 step 1).
    let headroom = steps.extra_steps.max(1);
    let req = |rank: u32, slot: usize| format!("p{id}.r{rank}.shadow{slot}");
    p.drain_fence();
    let ranks = s.scenario.dp_ranks as usize;
    let random_kda = s.bench.random_kda;
    let mut registered: Vec<Vec<usize>> = vec![Vec::new(); ranks];
    let mut local_ok = vec![true; ranks];
    let mut unanticipated = false;
    let mutant = p.mutant.and_then(crate::bugs::Mutant::bug);
    // Mutants of §8.2 bugs 1 and 6 attempt a registration the pre-check would refuse.
    let attempt_anyway = matches!(
        mutant,
        Some(BugMutant::ShadowTailNotReserved | BugMutant::RegistrationNotAtomic | BugMutant::MarginSingleSteadyStep)
    );
    let late_release = p.bug(BugMutant::CowReleaseInWindow);
    let keep_queue = p.bug(BugMutant::CowQueueNotDrained);
    p.step_live(|rank, live| {
        for (slot, &ctx) in injected.iter().enumerate() {
            let armed = live.e.registration_fails_next();
            let op = registration_op(
                live.e,
                (&req(rank, slot), &chain_id(generation, rank, slot)),
                ctx,
                headroom,
                (true, random_kda),
                mutant,
            );
            if matches!(op, PlanOp::RegisterShadow { ok: true, .. }) {
                live.op(op);
                registered[rank as usize].push(slot);
                continue;
            }
            // A local failure: the injected one is attempted (and consumed); a pool
            // shortfall is caught by the pre-check and nothing is attempted (§3.5
            // step 2). Either way this rank stops registering for the point.
            if armed || attempt_anyway {
                live.op(op);
            }
            if !armed {
                unanticipated = true;
            }
            local_ok[rank as usize] = false;
            break;
        }
        // §3.6 / §8.2 bug 11: CoW retentions released in the injection window;
        // §8.2 bug 12 leaves them queued when a shadow of the point failed.
        let drained = !keep_queue || local_ok[rank as usize];
        if !late_release && drained {
            live.op(PlanOp::ReleaseCow);
        }
    });
    let environment_faults = p
        .faults
        .iter()
        .any(|f| matches!(f, FaultSpec::ShrinkPool { .. } | FaultSpec::Abort { .. }));
    if unanticipated && !environment_faults && !p.lenient() {
        return Err(SweepError(format!(
            "point {id}: a covered shadow failed to register (the plan did not reserve its tail){}",
            p.error.as_ref().map_or(String::new(), |e| format!("; first: {e}"))
        )));
    }
    // §8.2 bug 15: a rank that failed locally goes its own way while its peers
    // measure the point.
    let local_verdict = p.bug(BugMutant::LocalStageVerdict) && local_ok.contains(&true);
    // A rank retires the shadows it registered through the fence and drains it.
    let retire_registered = |rank: u32| -> Vec<PlanOp> {
        let mut ops: Vec<PlanOp> = registered[rank as usize]
            .iter()
            .map(|&slot| PlanOp::Finish {
                req: req(rank, slot),
                fenced: true,
            })
            .collect();
        ops.push(PlanOp::ProcessOutputs { lag: 0 });
        ops
    };
    if local_ok.contains(&false) && !local_verdict {
        // Group verdict false: every rank retires what it registered, nothing is injected.
        if registered.iter().any(|r| !r.is_empty()) {
            p.step(retire_registered);
        }
        return Ok(false);
    }
    let mut timed = Vec::new();
    let mut kv_tokens = Vec::new();
    let mut variances = Vec::new();
    // §8.2 bug 21: the admission step alone.
    let extra_steps = if p.bug(BugMutant::AdmissionShapedDecode) {
        0
    } else {
        steps.extra_steps
    };
    for k in 0..=extra_steps {
        // Shadows allocate nothing: their tails were registered up front (§1.10).
        timed.push(p.step(|rank| {
            if !local_ok[rank as usize] {
                // (bug 15) the failed rank idles; its fallback comes later.
                return vec![PlanOp::ProcessOutputs { lag: 0 }];
            }
            let mut ops = decode_step(injected.len(), rank, id, k == 0, false, &req);
            if k == 0 && late_release {
                let at = ops
                    .iter()
                    .position(|o| matches!(o, PlanOp::BeginTimed { .. }))
                    .unwrap_or(0)
                    + 1;
                ops.insert(at, PlanOp::ReleaseCow);
            }
            ops
        }));
        let ctx: Vec<u64> = injected.iter().map(|&l| l + k).collect();
        kv_tokens.push(ctx.iter().sum());
        variances.push(variance(&ctx));
    }
    let retire_ops: Vec<Vec<PlanOp>> = (0..s.scenario.dp_ranks)
        .map(|rank| {
            if local_ok[rank as usize] {
                p.drained(retire(injected.len(), rank, &req))
            } else {
                retire_registered(rank)
            }
        })
        .collect();
    p.step(|rank| retire_ops[rank as usize].clone());
    let mut point = pt.point.clone();
    if pt.adm.context_clamped {
        point.total_kv_read_tokens = pt.adm.steady_kv_tokens;
        point.sample_reasons.push(SampleReason::ContextClamped);
    }
    point.sample_reasons.push(SampleReason::KvwarmRealKv);
    p.finished_points += 1;
    // §5.2: random KDA labels real rows `real_attention_kv_random_kda`.
    let regime = if random_kda && p.bug(BugMutant::KdaRegimeMislabel) {
        // §8.2 bug 24 (V-A): every random-KDA decode row labelled fake.
        "fake_attention_kv_random_kda"
    } else if random_kda {
        "real_attention_kv_random_kda"
    } else {
        "real_kv"
    };
    for rank in 0..s.scenario.dp_ranks {
        let prompts = injected
            .iter()
            .enumerate()
            .map(|(slot, &ctx)| {
                // The shadow's tokens: the chain's first ctx + 1 (§3.5 step 3).
                let t = chain_tokens(rank, slot, ctx + 1, vocab).materialise();
                PromptEvidence {
                    slot: slot as u64,
                    num_tokens: t.len() as u64,
                    sha256: prompt_sha256(&t),
                }
            })
            .collect();
        p.meta.executions.push(ExecutionRecord {
            rank,
            point: point.clone(),
            kv_seed_regime: regime.into(),
            timed_steps: timed.clone(),
            decode_kv_tokens: kv_tokens.clone(),
            decode_kv_variance: variances.clone(),
            prompts,
            warm_prefill_tokens: 0,
        });
    }
    Ok(true)
}
