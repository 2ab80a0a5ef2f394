//! Points no rung measured, on synthetic KV after the chains are shed (§3.1 reorder #2).

use super::rungs::Point;
use crate::fpm::capacity::LayoutNeed;
use crate::fpm::grid::{decode_step_plan, DecodeStepInput, GiantKvPolicy, GridConfig, SampleReason};
use crate::fpm::sweep::{plan_execution, Kv, SweepBuilder, SweepError};

/// The uncovered points and the `demoted` ones (covered, but their stage failed
/// on a single rank), each measured on fake KV in grid order.
pub(super) fn measure_on_synthetic_kv(
    p: &mut SweepBuilder<'_>,
    points: &[Point],
    demoted: &[u64],
    cfg: &GridConfig,
    need: &LayoutNeed,
) -> Result<(), SweepError> {
    let s = p.s;
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
                repeats: s.bench.giant_kv_repeats,
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
