//! Sweep planners: drive the engine online, step by step, and record what they
//! did as a plan. Part I: synthetic ("fake") KV and native exact-context warm-up
//! (seed 000); shared-prefix chains with shadows (seed 001, FPM model II) in `chain`.

mod chain;
mod dp;
mod meta;
mod ops;
mod timeout;

pub use chain::{recurrent_shadow_range, shadow_registration, shadow_registration_with, shadow_tail_blocks};
pub use meta::{
    load_plan_checked, BenchmarkMeta, CapacityFallback, ExecutionRecord, PromptEvidence, SkippedPoint, StageRecord,
};

use sha2::{Digest, Sha256};

use super::capacity::{native_footprint, LayoutNeed};
use super::gate::{auto_strategy, gate, GateVerdict, Strategy};
use super::grid::{
    build_grid, decode_admission, decode_step_plan, BenchmarkPoint, DecodeStepInput, DecodeStepPlan, GiantKvPolicy,
    Grid, PointType, SampleReason,
};
use super::scenarios::BuiltinScenario;
use crate::bugs::{BugMutant, Mutant};
use crate::engine::Engine;
use crate::plan::{FaultSpec, Plan, PlanOp, Step, Tokens};
use crate::slips::SlipMutant;
use ops::{decode_step, fake_injection, native_prefill, retire};

/// Why a sweep cannot be planned (bad strategy or scenario: exit code 2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SweepError(pub String);

/// What a sweep run adds to its scenario: a soft-timeout override (simulated
/// seconds, §1.12) and faults the planner's own engines see as the executor will.
#[derive(Clone, Debug, Default)]
pub struct SweepOptions {
    /// A soft timeout in simulated seconds (replaces the scenario's).
    pub timeout_seconds: Option<f64>,
    /// Faults the plan carries; the planner's engines see them as the executor will.
    pub faults: Vec<FaultSpec>,
    /// A deliberate bug (`kvsim check --mutant`): the planner records the plan the
    /// buggy code would run, and its own engines tolerate the violations that follow.
    pub mutant: Option<Mutant>,
}

/// A planned sweep: the plan to run and the planner's record.
pub struct SweepPlan {
    /// The plan to run.
    pub plan: Plan,
    /// The planner's record (rebuilds the artifact).
    pub meta: BenchmarkMeta,
}

/// SHA-256 of token ids encoded as little-endian u32 (§6.6 `prompt_hash_encoding`).
pub fn prompt_sha256(tokens: &[u64]) -> String {
    let mut h = Sha256::new();
    for &t in tokens {
        h.update((t as u32).to_le_bytes());
    }
    hex(&h.finalize())
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    // By hand: one `format!` per byte was a tenth of a swarm case's planning time.
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

fn variance(v: &[u64]) -> f64 {
    let n = v.len().max(1) as f64;
    let mean = v.iter().sum::<u64>() as f64 / n;
    v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n
}

/// How one execution gets its KV.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kv {
    Native,
    Fake,
}

struct SweepBuilder<'a> {
    s: &'a BuiltinScenario,
    steps: Vec<Step>,
    next_step: u64,
    meta: BenchmarkMeta,
    /// Chain planning drives one engine per rank online (`None` for part I planners).
    engines: Option<Vec<Engine>>,
    /// The first op the planner's own engine refused or judged (a planner bug).
    error: Option<String>,
    /// The simulated clock (the executor's: `nominal_step_ns` of each step's forward tokens).
    clock_ns: u64,
    pending_tokens: u64,
    /// The soft deadline (§1.12), and the step at which the planner first saw it passed.
    deadline_ns: Option<u64>,
    timeout_step: Option<u64>,
    /// Points measured so far (rank 0's executions); the sweep stopped at the deadline.
    finished_points: u64,
    stopped: bool,
    faults: Vec<FaultSpec>,
    mutant: Option<Mutant>,
}

impl SweepBuilder<'_> {
    /// Whether seed-bug mutant `m` is on.
    fn bug(&self, m: BugMutant) -> bool {
        self.mutant == Some(Mutant::Bug(m))
    }

    /// Whether slip `s` is on.
    fn slip(&self, s: SlipMutant) -> bool {
        self.mutant == Some(Mutant::Slip(s))
    }

    /// A mutated planner keeps planning past violations its own engines see: the
    /// executor is the one to catch them.
    fn lenient(&self) -> bool {
        self.mutant.is_some()
    }

    /// A step's closing fence drain (`_bench_frees_pending` idle step, §3.7);
    /// §8.2 bug 14 leaves it out.
    fn drained(&self, mut ops: Vec<PlanOp>) -> Vec<PlanOp> {
        if self.bug(BugMutant::NoIdleBeforeDraw) && matches!(ops.last(), Some(PlanOp::ProcessOutputs { .. })) {
            ops.pop();
        }
        ops
    }

    /// One `kvwarm.stages[]` entry per rank (every rank runs the stage in lock-step), and the
    /// stage's prefill tokens counted as untimed warm-up.
    fn record_stage(&mut self, stage: StageRecord, untimed_prefill_tokens: u64) {
        for rank in 0..self.s.scenario.dp_ranks {
            self.meta.stages.push(StageRecord { rank, ..stage.clone() });
        }
        self.meta.untimed_prefill_tokens += untimed_prefill_tokens;
    }

    /// Append one lock-step step: `ops_for(rank)` gives each rank's ops.
    fn step(&mut self, ops_for: impl Fn(u32) -> Vec<PlanOp>) -> u64 {
        let step = self.next_step;
        for rank in 0..self.s.scenario.dp_ranks {
            let ops = ops_for(rank);
            self.pending_tokens += crate::plan::forward_tokens(&ops);
            if let Some(engines) = &mut self.engines {
                let e = &mut engines[rank as usize];
                // The executor replaying the plan starts each rank's step the same way.
                crate::driver::begin_rank_step(e, &self.faults, step);
                let lenient = self.mutant.is_some();
                for op in &ops {
                    if let Err(m) = chain::apply_checked(e, op, lenient) {
                        self.error.get_or_insert(format!("step {step} rank {rank}: {m}"));
                    }
                }
            }
            self.steps.push(Step { step, rank, ops });
        }
        self.end_step();
        step
    }
}

/// Plan a whole decode sweep of `s` under `requested` (`None` = auto).
pub fn plan_sweep(s: &BuiltinScenario, requested: Option<Strategy>) -> Result<SweepPlan, SweepError> {
    plan_sweep_with(s, requested, &SweepOptions::default())
}

/// `plan_sweep` with a soft-timeout override and faults.
pub fn plan_sweep_with(
    s: &BuiltinScenario,
    requested: Option<Strategy>,
    opts: &SweepOptions,
) -> Result<SweepPlan, SweepError> {
    let bug = |m| opts.mutant == Some(Mutant::Bug(m));
    let verdict = gate_with_mutant(s, opts.mutant);
    let chosen = choose(s, &verdict, requested)?;
    let mut need = LayoutNeed::new(s.scenario.kv_config());
    need.align_one_block = bug(BugMutant::AlignStateOneBlock);
    let mut cfg = s.grid_config();
    // §8.2 bug 17: per-rank plans from rank 0's local pool.
    let ranks = if bug(BugMutant::PerRankCapacity) {
        1
    } else {
        s.scenario.dp_ranks
    };
    dp::negotiate_capacity(ranks, &opts.faults, &mut cfg);
    let grid = build_grid(&cfg, &need).map_err(|e| SweepError(format!("grid: {e}")))?;
    let usable = cfg.capacity.usable_blocks_with_watermark;
    let enabled = requested != Some(Strategy::Synthetic);
    let meta = sweep_meta(s, requested, &verdict, chosen, &grid, usable, opts);
    let mut p = SweepBuilder::new(s, meta, opts);
    if chosen == Some(Strategy::Chain) {
        chain::plan_chain_sweep(&mut p, &grid, &cfg, &need)?;
        return finish_sweep(p);
    }
    let direct = DirectSizing {
        s,
        enabled,
        usable,
        policy: GiantKvPolicy {
            threshold_tokens: s.bench.giant_kv_threshold,
            repeats: s.bench.giant_kv_repeats,
        },
        native_need: LayoutNeed {
            native_reserve: true,
            ..need.clone()
        },
        need: &need,
    };
    plan_direct_sweep(&mut p, grid, &verdict, chosen, &direct)?;
    finish_sweep(p)
}

/// The gate's verdict on `s`, as the mutant's code would give it.
fn gate_with_mutant(s: &BuiltinScenario, mutant: Option<Mutant>) -> GateVerdict {
    let mut verdict = gate(s);
    if mutant == Some(Mutant::Bug(BugMutant::RecurrentStateBorrowed))
        && verdict.skip_reason.as_deref() != Some("dense_model_content_insensitive")
    {
        // §8.2 bug 8: before the gate rejected hybrid state layers.
        verdict.chain = s.scenario.scheduler.enable_caching;
        if verdict.chain {
            verdict.skip_reason = None;
        }
    }
    verdict
}

/// The planner's record before any point is planned.
fn sweep_meta(
    s: &BuiltinScenario,
    requested: Option<Strategy>,
    verdict: &GateVerdict,
    chosen: Option<Strategy>,
    grid: &Grid,
    usable: u64,
    opts: &SweepOptions,
) -> BenchmarkMeta {
    let enabled = requested != Some(Strategy::Synthetic);
    BenchmarkMeta {
        scenario: s.name.clone(),
        requested_strategy: requested.map_or("auto".into(), |r| format!("{r:?}").to_lowercase()),
        enabled,
        warm_eligible: enabled.then_some(verdict.skip_reason.is_none()),
        skip_reason: if enabled { verdict.skip_reason.clone() } else { None },
        initialization_strategy: chosen.and_then(Strategy::initialization_strategy).map(str::to_string),
        grid_digest: grid.digest.clone(),
        expected_points: grid.expected_points,
        giant_kv_threshold: s.bench.giant_kv_threshold,
        giant_kv_repeats: s.bench.giant_kv_repeats,
        usable_blocks: usable,
        executions: Vec::new(),
        stages: Vec::new(),
        capacity_fallbacks: Vec::new(),
        untimed_prefill_tokens: 0,
        config: timeout::config_with_override(s, opts),
        stop_reason: None,
        skipped: Vec::new(),
        missing_phases: Vec::new(),
    }
}

impl<'a> SweepBuilder<'a> {
    /// A planner at step 0 with nothing planned yet.
    fn new(s: &'a BuiltinScenario, meta: BenchmarkMeta, opts: &SweepOptions) -> SweepBuilder<'a> {
        SweepBuilder {
            s,
            steps: Vec::new(),
            next_step: 0,
            meta,
            engines: None,
            error: None,
            clock_ns: 0,
            pending_tokens: 0,
            deadline_ns: Some(timeout::deadline_ns(s, opts)),
            timeout_step: None,
            finished_points: 0,
            stopped: false,
            faults: opts.faults.clone(),
            mutant: opts.mutant,
        }
    }
}

/// What a part I (synthetic or native, seed 000) point's steps and footprint
/// depend on.
struct DirectSizing<'a> {
    s: &'a BuiltinScenario,
    enabled: bool,
    usable: u64,
    policy: GiantKvPolicy,
    need: &'a LayoutNeed,
    native_need: LayoutNeed,
}

impl DirectSizing<'_> {
    /// §1.10 step 4: steady steps of a point admitted at `injected`, on real or fake KV.
    fn step_plan(&self, point: &BenchmarkPoint, injected: &[u64], real: bool) -> DecodeStepPlan {
        decode_step_plan(
            DecodeStepInput {
                kvwarm_enabled: self.enabled,
                kvwarm_real: real,
                total_kv_read_tokens: point.total_kv_read_tokens,
                injected_lengths: injected,
                max_model_len: self.s.scenario.scheduler.max_model_len,
                usable_blocks_with_watermark: self.usable,
            },
            self.policy,
            self.need,
        )
    }

    /// The native footprint of a point on its real-KV plan (seed 000), and its depth.
    fn native_required(&self, point: &BenchmarkPoint) -> Result<(u64, u64), SweepError> {
        let adm =
            decode_admission(point.batch_size, point.total_kv_read_tokens).map_err(|e| SweepError(e.to_string()))?;
        let real = self.step_plan(point, &adm.injected_lengths, true);
        let depth = adm.injected_lengths.iter().copied().max().unwrap_or(0);
        Ok((
            native_footprint(&self.native_need, &adm.injected_lengths, real.expected_fpms),
            depth,
        ))
    }
}

/// Part I: every decode point in grid order, on native KV where chosen and the
/// footprint fits, on synthetic KV otherwise.
fn plan_direct_sweep(
    p: &mut SweepBuilder<'_>,
    mut grid: Grid,
    verdict: &GateVerdict,
    chosen: Option<Strategy>,
    direct: &DirectSizing<'_>,
) -> Result<(), SweepError> {
    let usable = direct.usable;
    if chosen == Some(Strategy::Native) && p.attention_dp() {
        // §7.4: attention-DP grids are real-KV only.
        let mut dropped = Vec::new();
        for e in grid.entries.iter().filter(|e| e.point.point_type == PointType::Decode) {
            let (required, depth) = direct.native_required(&e.point)?;
            if required > usable {
                let fallback = CapacityFallback {
                    benchmark_id: None,
                    batch: e.point.batch_size,
                    depth,
                    required_blocks: required,
                    usable_blocks: usable,
                    total_kv_read_tokens: e.point.total_kv_read_tokens,
                };
                dropped.push((e.key.clone(), fallback));
            }
        }
        grid = dp::drop_uncovered(p, &grid, dropped);
    }
    for entry in grid.entries.iter().filter(|e| e.point.point_type == PointType::Decode) {
        if p.stop_before_point() {
            break;
        }
        let point = &entry.point;
        let adm =
            decode_admission(point.batch_size, point.total_kv_read_tokens).map_err(|e| SweepError(e.to_string()))?;
        let mut kv = if chosen == Some(Strategy::Native) {
            Kv::Native
        } else {
            Kv::Fake
        };
        let mut plan_steps = direct.step_plan(point, &adm.injected_lengths, kv == Kv::Native);
        if kv == Kv::Native {
            let (required, depth) = direct.native_required(point)?;
            if required > usable {
                // A point whose footprint exceeds the pool is measured on synthetic KV (seed 000).
                kv = Kv::Fake;
                plan_steps = direct.step_plan(point, &adm.injected_lengths, false);
                p.meta.capacity_fallbacks.push(CapacityFallback {
                    benchmark_id: Some(point.benchmark_id),
                    batch: point.batch_size,
                    depth,
                    required_blocks: required,
                    usable_blocks: usable,
                    total_kv_read_tokens: point.total_kv_read_tokens,
                });
            }
        }
        let mut point = point.clone();
        if adm.context_clamped {
            point.total_kv_read_tokens = adm.steady_kv_tokens;
            point.sample_reasons.push(SampleReason::ContextClamped);
        }
        let regime = regime(verdict, chosen, direct.enabled, kv, &mut point);
        // Issue 19's slip: the contexts themselves where the admitted lengths belong.
        let lengths = if kv == Kv::Native && p.slip(SlipMutant::CoordinateOffByOne) {
            &adm.context_lengths
        } else {
            &adm.injected_lengths
        };
        plan_execution(p, point, regime, kv, lengths, plan_steps.extra_steps)?;
    }
    Ok(())
}

/// The final step: drain the fence, reset the prefix cache, end the sweep.
fn finish_sweep(mut p: SweepBuilder<'_>) -> Result<SweepPlan, SweepError> {
    let s = p.s;
    // DONE (§1.8) resets the prefix cache once no fenced free is owed (§3.7).
    p.drain_fence();
    // A mutated planner does not promise the reset succeeds: PL-CLEAN-END judges it.
    let lenient = p.lenient();
    let expect = (!lenient).then_some(true);
    p.step(|_| {
        vec![
            PlanOp::ProcessOutputs { lag: 0 },
            PlanOp::ResetPrefixCache { expect },
            PlanOp::EndSweep,
        ]
    });
    let mut plan = Plan::new(s.scenario.clone());
    plan.steps = p.steps;
    plan.faults = p.faults;
    plan.benchmark = Some(serde_json::to_value(&p.meta).expect("meta serializes"));
    if let Some(e) = p.error.filter(|_| !lenient) {
        return Err(SweepError(format!(
            "the chain planner's engine refused its own plan: {e}"
        )));
    }
    Ok(SweepPlan { plan, meta: p.meta })
}

fn choose(s: &BuiltinScenario, v: &GateVerdict, requested: Option<Strategy>) -> Result<Option<Strategy>, SweepError> {
    match requested {
        None => Ok(auto_strategy(v)),
        Some(Strategy::Synthetic) => Ok(Some(Strategy::Synthetic)),
        Some(Strategy::Native) if v.native => Ok(Some(Strategy::Native)),
        Some(Strategy::Native) => Err(SweepError(format!(
            "strategy native does not apply to scenario {}: its layout needs a window or state group and experts or state layers",
            s.name
        ))),
        Some(Strategy::Chain) if v.chain => Ok(Some(Strategy::Chain)),
        Some(Strategy::Chain) => Err(SweepError(format!(
            "strategy chain does not apply to scenario {}: the shared-chain gate needs experts under expert parallelism (or random KDA), prefix caching, no recurrent state layers and (in kvsim's port) no sliding-window or chunked-local group",
            s.name
        ))),
    }
}

/// `kv_seed_regime` and the stamp on the point's reasons (§5.2, seed 000).
fn regime(v: &GateVerdict, chosen: Option<Strategy>, enabled: bool, kv: Kv, point: &mut BenchmarkPoint) -> String {
    if !enabled {
        return "legacy".into();
    }
    if let Some(reason) = &v.skip_reason {
        // Gate-rejected configurations are not stamped (seed 000): skip:<reason>.
        return format!("skip:{reason}");
    }
    if kv == Kv::Native && chosen == Some(Strategy::Native) {
        point.sample_reasons.push(SampleReason::KvwarmRealKv);
        "real_kv".into()
    } else {
        point.sample_reasons.push(SampleReason::KvwarmFakeFallback);
        "fake_fallback".into()
    }
}

fn plan_execution(
    p: &mut SweepBuilder<'_>,
    point: BenchmarkPoint,
    regime: String,
    kv: Kv,
    injected: &[u64],
    extra_steps: u64,
) -> Result<(), SweepError> {
    let id = point.benchmark_id;
    let vocab = p.s.scenario.model.vocab_size;
    // §3.9: a unique salt per (point, rank, slot); §8.2 bug 20 salts per slot only.
    let shared_salts = p.bug(BugMutant::SharedSalts);
    let salt = |rank: u32, slot: usize| {
        if shared_salts {
            format!("slot{slot}")
        } else {
            format!("point{id}:dp{rank}:slot{slot}")
        }
    };
    // What a request's prompt tokens are drawn from: its salt, or (the swarm's
    // `shared_prompt_content`) its slot alone, so that only the cache salt separates points.
    let shared_content = p.s.bench.shared_prompt_content;
    let content = |rank: u32, slot: usize| {
        if shared_content {
            format!("shared:dp{rank}:slot{slot}")
        } else {
            salt(rank, slot)
        }
    };
    // §8.2 bug 21: measured on the admission step alone.
    let extra_steps = if p.bug(BugMutant::AdmissionShapedDecode) {
        0
    } else {
        extra_steps
    };
    // §8.2 bug 4: the synthetic blocks' registration is left to the timed admission step.
    let late_cache = kv == Kv::Fake && p.bug(BugMutant::RegistrationInTimedWindow);
    let req = |rank: u32, slot: usize| format!("p{id}.r{rank}.s{slot}");
    let prompt_len = |len: u64| if kv == Kv::Native { len } else { len + 1 };
    let prompts = |rank: u32| -> Vec<PromptEvidence> {
        injected
            .iter()
            .enumerate()
            .map(|(slot, &len)| {
                let t = Tokens::Salted {
                    salt: content(rank, slot),
                    len: prompt_len(len),
                    vocab,
                }
                .materialise();
                PromptEvidence {
                    slot: slot as u64,
                    num_tokens: t.len() as u64,
                    sha256: prompt_sha256(&t),
                }
            })
            .collect()
    };
    let first_step = p.next_step;
    let warm = match kv {
        Kv::Native => match native_prefill(p, injected, (&salt, &content), &req, vocab) {
            Ok(w) => w,
            Err(waiting) => {
                // The deadline passed mid-prefill: the stage is shed, nothing measured (§1.12).
                p.step(|rank| timeout::shed_all(injected.len(), rank, &req));
                if p.bug(BugMutant::ShedWithoutFinish) && !waiting.is_empty() {
                    // §8.2 bug 2: shed by hand, a request still waiting is admitted again.
                    p.step(|rank| {
                        waiting
                            .iter()
                            .map(|&slot| PlanOp::AddRequest {
                                req: req(rank, slot),
                                prompt: Tokens::Salted {
                                    salt: content(rank, slot),
                                    len: injected[slot],
                                    vocab,
                                },
                                cache_salt: Some(salt(rank, slot)),
                            })
                            .collect()
                    });
                }
                return Ok(());
            }
        },
        Kv::Fake => {
            p.step(|rank| {
                let mut ops = fake_injection(injected, rank, (&salt, &content), &req, vocab);
                if late_cache {
                    ops.retain(|o| !matches!(o, PlanOp::CacheBlocks { .. }));
                }
                ops
            });
            0
        }
    };
    let mut timed = Vec::new();
    let mut kv_tokens = Vec::new();
    let mut variances = Vec::new();
    let retire_in_flight = p.s.bench.retire_in_flight && p.s.scenario.scheduler.async_scheduling;
    for k in 0..=extra_steps {
        let admission = k == 0;
        let schedule = !(admission && kv == Kv::Fake);
        timed.push(p.step(|rank| {
            let mut ops = decode_step(injected.len(), rank, id, (k, vocab), admission, schedule, &req);
            if admission && late_cache {
                let at = ops
                    .iter()
                    .position(|o| matches!(o, PlanOp::BeginTimed { .. }))
                    .unwrap_or(0)
                    + 1;
                for (slot, &len) in injected.iter().enumerate().rev() {
                    ops.insert(
                        at,
                        PlanOp::CacheBlocks {
                            req: req(rank, slot),
                            num_tokens: len,
                        },
                    );
                }
            }
            if admission && p.s.bench.reset_probe {
                ops::reset_probe(&mut ops);
            }
            if retire_in_flight && k == extra_steps {
                ops::retire_in_flight(&mut ops, injected.len(), rank, &req);
            }
            ops
        }));
        let ctx: Vec<u64> = injected.iter().map(|&l| l + k).collect();
        kv_tokens.push(ctx.iter().sum());
        variances.push(variance(&ctx));
    }
    let retire_ops = |rank| {
        if retire_in_flight {
            // Retired already; the batch queue processes the last step now, and the fence drains.
            p.drained(vec![PlanOp::ProcessOutputs { lag: 0 }])
        } else {
            p.drained(retire(injected.len(), rank, &req))
        }
    };
    let per_rank: Vec<Vec<PlanOp>> = (0..p.s.scenario.dp_ranks).map(retire_ops).collect();
    p.step(|rank| per_rank[rank as usize].clone());
    if kv == Kv::Native {
        let stage = StageRecord {
            rank: 0,
            benchmark_id: id,
            batch: point.batch_size,
            depth: injected.iter().copied().max().unwrap_or(0),
            steps: p.next_step - first_step,
            soft_timeout: false,
            group_fallback: false,
        };
        p.record_stage(stage, warm);
    }
    p.finished_points += 1;
    for rank in 0..p.s.scenario.dp_ranks {
        p.meta.executions.push(ExecutionRecord {
            rank,
            point: point.clone(),
            kv_seed_regime: regime.clone(),
            timed_steps: timed.clone(),
            decode_kv_tokens: kv_tokens.clone(),
            decode_kv_variance: variances.clone(),
            prompts: prompts(rank),
            warm_prefill_tokens: if kv == Kv::Native { warm } else { 0 },
        });
    }
    Ok(())
}

#[cfg(test)]
mod hex_tests {
    #[test]
    fn hex_is_lowercase_two_digits_a_byte() {
        assert_eq!(super::hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(super::hex(&[]), "");
    }
}
