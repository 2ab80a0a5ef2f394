//! One covered decode point measured on shadows that borrow a parked rung (§3.5, §1.10).

use super::ids::{chain_id, chain_tokens};
use super::registration::registration_op;
use super::rungs::Point;
use crate::bugs::BugMutant;
use crate::fpm::capacity::LayoutNeed;
use crate::fpm::grid::{decode_step_plan, DecodeStepInput, DecodeStepPlan, GiantKvPolicy, SampleReason};
use crate::fpm::sweep::ops::{decode_step, retire};
use crate::fpm::sweep::{prompt_sha256, variance, ExecutionRecord, PromptEvidence, SweepBuilder, SweepError};
use crate::plan::{FaultSpec, PlanOp};

/// One covered point on shadows (§3.5, §1.10): register one shadow per request in
/// the untimed injection step, release the CoW retentions there, then the timed
/// admission and steady steps, then retire the shadows through the fence.
/// Returns false when a rank failed locally: the group verdict (AND over ranks,
/// taken before the point is injected) makes every rank retire the shadows it
/// registered and not measure the point (§7.3; §8.1 invariant 34).
pub(super) fn plan_shadow_execution(p: &mut SweepBuilder<'_>, pt: &Point, generation: u64) -> Result<bool, SweepError> {
    let s = p.s;
    let id = pt.point.benchmark_id;
    let injected = &pt.adm.injected_lengths;
    let steps = real_kv_step_plan(p, pt);
    // `headroom = max(1, extra steps)` (§3.5 step 1).
    let headroom = steps.extra_steps.max(1);
    let req = |rank: u32, slot: usize| format!("p{id}.r{rank}.shadow{slot}");
    p.drain_fence();
    let late_release = p.bug(BugMutant::CowReleaseInWindow);
    let reg = register_shadows(p, injected, generation, headroom, late_release, &req);
    let environment_faults = p
        .faults
        .iter()
        .any(|f| matches!(f, FaultSpec::ShrinkPool { .. } | FaultSpec::Abort { .. }));
    if reg.unanticipated && !environment_faults && !p.lenient() {
        return Err(SweepError(format!(
            "point {id}: a covered shadow failed to register (the plan did not reserve its tail){}",
            p.error.as_ref().map_or(String::new(), |e| format!("; first: {e}"))
        )));
    }
    // §8.2 bug 15: a rank that failed locally goes its own way while its peers
    // measure the point.
    let local_verdict = p.bug(BugMutant::LocalStageVerdict) && reg.local_ok.contains(&true);
    if reg.local_ok.contains(&false) && !local_verdict {
        // Group verdict false: every rank retires what it registered, nothing is injected.
        if reg.registered.iter().any(|r| !r.is_empty()) {
            p.step(|rank| reg.retire_registered(rank, &req));
        }
        return Ok(false);
    }
    // §8.2 bug 21: the admission step alone.
    let extra_steps = if p.bug(BugMutant::AdmissionShapedDecode) {
        0
    } else {
        steps.extra_steps
    };
    let timed = timed_steps(p, pt, extra_steps, &reg.local_ok, late_release, &req);
    let retire_ops: Vec<Vec<PlanOp>> = (0..s.scenario.dp_ranks)
        .map(|rank| {
            if reg.local_ok[rank as usize] {
                p.drained(retire(injected.len(), rank, &req))
            } else {
                reg.retire_registered(rank, &req)
            }
        })
        .collect();
    p.step(|rank| retire_ops[rank as usize].clone());
    record_executions(p, pt, timed);
    Ok(true)
}

/// The point's decode steps on real KV (§1.10 step 4).
fn real_kv_step_plan(p: &SweepBuilder<'_>, pt: &Point) -> DecodeStepPlan {
    let s = p.s;
    let need = LayoutNeed::new(s.scenario.kv_config());
    decode_step_plan(
        DecodeStepInput {
            kvwarm_enabled: true,
            kvwarm_real: true,
            total_kv_read_tokens: pt.point.total_kv_read_tokens,
            injected_lengths: &pt.adm.injected_lengths,
            max_model_len: s.scenario.scheduler.max_model_len,
            usable_blocks_with_watermark: s.grid_config().capacity.usable_blocks_with_watermark,
        },
        GiantKvPolicy {
            threshold_tokens: s.bench.giant_kv_threshold,
            repeats: s.bench.giant_kv_repeats,
        },
        &need,
    )
}

/// What the injection step left on each rank.
struct Registered {
    /// The slots whose shadow registered, per rank.
    registered: Vec<Vec<usize>>,
    /// Whether every shadow of the rank registered.
    local_ok: Vec<bool>,
    /// A registration failed that no injected stage failure announced.
    unanticipated: bool,
}

impl Registered {
    /// A rank retires the shadows it registered through the fence and drains it.
    fn retire_registered(&self, rank: u32, req: &dyn Fn(u32, usize) -> String) -> Vec<PlanOp> {
        let mut ops: Vec<PlanOp> = self.registered[rank as usize]
            .iter()
            .map(|&slot| PlanOp::Finish {
                req: req(rank, slot),
                fenced: true,
            })
            .collect();
        ops.push(PlanOp::ProcessOutputs { lag: 0 });
        ops
    }
}

/// The untimed injection step: every rank registers one shadow per request on
/// the rung's chains, stopping at its first failure, then releases the CoW
/// retentions (§3.5 steps 2–3, §3.6).
fn register_shadows(
    p: &mut SweepBuilder<'_>,
    injected: &[u64],
    generation: u64,
    headroom: u64,
    late_release: bool,
    req: &dyn Fn(u32, usize) -> String,
) -> Registered {
    let ranks = p.s.scenario.dp_ranks as usize;
    let random_kda = p.s.bench.random_kda;
    let mut reg = Registered {
        registered: vec![Vec::new(); ranks],
        local_ok: vec![true; ranks],
        unanticipated: false,
    };
    let mutant = p.mutant.and_then(crate::bugs::Mutant::bug);
    // Mutants of §8.2 bugs 1 and 6 attempt a registration the pre-check would refuse.
    let attempt_anyway = matches!(
        mutant,
        Some(BugMutant::ShadowTailNotReserved | BugMutant::RegistrationNotAtomic | BugMutant::MarginSingleSteadyStep)
    );
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
                reg.registered[rank as usize].push(slot);
                continue;
            }
            // A local failure: the injected one is attempted (and consumed); a pool
            // shortfall is caught by the pre-check and nothing is attempted (§3.5
            // step 2). Either way this rank stops registering for the point.
            if armed || attempt_anyway {
                live.op(op);
            }
            if !armed {
                reg.unanticipated = true;
            }
            reg.local_ok[rank as usize] = false;
            break;
        }
        // §3.6 / §8.2 bug 11: CoW retentions released in the injection window;
        // §8.2 bug 12 leaves them queued when a shadow of the point failed.
        let drained = !keep_queue || reg.local_ok[rank as usize];
        if !late_release && drained {
            live.op(PlanOp::ReleaseCow);
        }
    });
    reg
}

/// The timed steps of a point and what each read.
struct Timed {
    steps: Vec<u64>,
    kv_tokens: Vec<u64>,
    variances: Vec<f64>,
}

/// The timed admission step and the steady steps (§1.10); shadows allocate
/// nothing: their tails were registered up front.
fn timed_steps(
    p: &mut SweepBuilder<'_>,
    pt: &Point,
    extra_steps: u64,
    local_ok: &[bool],
    late_release: bool,
    req: &dyn Fn(u32, usize) -> String,
) -> Timed {
    let id = pt.point.benchmark_id;
    let vocab = p.s.scenario.model.vocab_size;
    let injected = &pt.adm.injected_lengths;
    let mut timed = Timed {
        steps: Vec::new(),
        kv_tokens: Vec::new(),
        variances: Vec::new(),
    };
    for k in 0..=extra_steps {
        timed.steps.push(p.step(|rank| {
            if !local_ok[rank as usize] {
                // (bug 15) the failed rank idles; its fallback comes later.
                return vec![PlanOp::ProcessOutputs { lag: 0 }];
            }
            let mut ops = decode_step(injected.len(), rank, id, (k, vocab), k == 0, false, req);
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
        timed.kv_tokens.push(ctx.iter().sum());
        timed.variances.push(variance(&ctx));
    }
    timed
}

/// The point measured on real KV: one execution record per rank, with the
/// shadows' prompt evidence.
fn record_executions(p: &mut SweepBuilder<'_>, pt: &Point, timed: Timed) {
    let s = p.s;
    let vocab = s.scenario.model.vocab_size;
    let random_kda = s.bench.random_kda;
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
        let prompts = pt
            .adm
            .injected_lengths
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
            timed_steps: timed.steps.clone(),
            decode_kv_tokens: timed.kv_tokens.clone(),
            decode_kv_variance: timed.variances.clone(),
            prompts,
            warm_prefill_tokens: 0,
        });
    }
}
