//! Pure pieces of decode measurement that follow from a grid point: the admission lengths and
//! steady coordinate, the number of steady steps (giant-KV repeats), and which FPM is retained.
//!
//! Source: `spec/research/dynamo_fpm.md` §1.10 steps 2 and 4 (`_bench_step_decode`), §1.11
//! (`_bench_save_current_point`), §6.6 (`estimate.method`), §8.1 invariants 15–17, §9.1
//! (`DYN_BENCH_GIANT_KV_THRESHOLD` / `DYN_BENCH_GIANT_KV_REPEATS`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::axis::{PartitionError, PartitionShape};
use super::config::{BlockNeed, BlockNeedQuery};

/// How a decode point is admitted (§1.10 step 2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecodeAdmission {
    /// Balanced contexts of the point's coordinate (≥ 1 each).
    pub context_lengths: Vec<u64>,
    /// `max(1, ctx − 1)`: one token short, ctx = 1 clamped.
    pub injected_lengths: Vec<u64>,
    /// `Σ injected` — the admission step's expected `sum_decode_kv_tokens`.
    pub admission_kv_tokens: u64,
    /// `admission + B` — the coordinate the steady step measures.
    pub steady_kv_tokens: u64,
    /// The steady coordinate differs from the point's: record it and add `context_clamped`.
    pub context_clamped: bool,
}

/// Admission of a decode point with `batch_size` requests and `total_kv_read_tokens` (§1.10 step 2).
pub fn decode_admission(batch_size: u64, total_kv_read_tokens: u64) -> Result<DecodeAdmission, PartitionError> {
    let contexts = PartitionShape::new(total_kv_read_tokens, batch_size, 1, 1)?.to_vec();
    let injected: Vec<u64> = contexts.iter().map(|&ctx| ctx.saturating_sub(1).max(1)).collect();
    let admission_kv_tokens: u64 = injected.iter().sum();
    let steady_kv_tokens = admission_kv_tokens + batch_size;
    Ok(DecodeAdmission {
        context_lengths: contexts,
        injected_lengths: injected,
        admission_kv_tokens,
        steady_kv_tokens,
        context_clamped: steady_kv_tokens != total_kv_read_tokens,
    })
}

/// The giant-KV knobs (§9.1): repeated steady steps for real-KV points and for fake points whose
/// total KV reaches the threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GiantKvPolicy {
    /// `DYN_BENCH_GIANT_KV_THRESHOLD`, default 1 000 000; 0 applies repeats to all fake points.
    pub threshold_tokens: u64,
    /// `DYN_BENCH_GIANT_KV_REPEATS`, default 3, floored at 1 when read.
    pub repeats: u64,
}

impl Default for GiantKvPolicy {
    fn default() -> Self {
        GiantKvPolicy {
            threshold_tokens: 1_000_000,
            repeats: 3,
        }
    }
}

impl GiantKvPolicy {
    /// Repeats as Dynamo reads them: `max(1, repeats)`.
    pub fn effective_repeats(&self) -> u64 {
        self.repeats.max(1)
    }
}

/// What the repeat rule reads about one popped decode point (§1.10 step 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeStepInput<'a> {
    /// `DYN_BENCH_KV_WARMUP` is on.
    pub kvwarm_enabled: bool,
    /// The point is injected on real (borrowed) KV.
    pub kvwarm_real: bool,
    /// The point's (steady) coordinate.
    pub total_kv_read_tokens: u64,
    /// `max(1, ctx − 1)` per request.
    pub injected_lengths: &'a [u64],
    /// The scheduler's `max_model_len` (V-A reads the local value here).
    pub max_model_len: u64,
    /// `_bench_usable_blocks(B, reserve_watermark=True)`.
    pub usable_blocks_with_watermark: u64,
}

/// Steady steps after admission and FPMs to wait for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecodeStepPlan {
    /// Steady steps after the admission step.
    pub extra_steps: u64,
    /// `extra_steps + 1` (admission plus steady samples).
    pub expected_fpms: u64,
}

/// §1.10 step 4: by default one steady step (2 FPMs). With the warm-up flag on and the point
/// real-KV or at/above the giant threshold: `repeats`, clipped to
/// `max(1, max_model_len − 1 − (max(injected) + 1))`; for fake points, if
/// `Σ blocks_per_req(max(c, 2) + repeats)` over the injected lengths exceeds the usable blocks
/// with watermark, back to 1. Real-KV points are clipped by model length only (§8.1 inv. 16).
pub fn decode_step_plan(input: DecodeStepInput<'_>, policy: GiantKvPolicy, need: &dyn BlockNeed) -> DecodeStepPlan {
    let repeated = input.kvwarm_enabled && (input.kvwarm_real || input.total_kv_read_tokens >= policy.threshold_tokens);
    if !repeated {
        return DecodeStepPlan {
            extra_steps: 1,
            expected_fpms: 2,
        };
    }
    let max_ctx = input.injected_lengths.iter().copied().max().unwrap_or(0) + 1;
    let model_room = input.max_model_len.saturating_sub(1).saturating_sub(max_ctx).max(1);
    let mut repeats = policy.effective_repeats().min(model_room);
    if !input.kvwarm_real {
        // DECISION: V-A prices the extra steps uncapped (`_bench_blocks_per_req` defaults); V-E's
        // admission-capped variant is not modelled.
        // DECISION: `c` is the point's context (injected + 1), as in the grid's
        // feasibility check (§1.5 step 5, `max(ctx, 2) + 1`): after `repeats` steady
        // steps a request holds ctx + repeats tokens. Pricing the injected length
        // instead is one block short at block boundaries (found by `kvsim check`).
        let multi = input
            .injected_lengths
            .iter()
            .map(|&c| need.blocks_per_req(BlockNeedQuery::plain((c + 1).max(2) + repeats)))
            .fold(0, u64::saturating_add);
        if multi > input.usable_blocks_with_watermark {
            repeats = 1;
        }
    }
    debug_assert!(repeats >= 1);
    DecodeStepPlan {
        extra_steps: repeats,
        expected_fpms: repeats + 1,
    }
}

/// `benchmark_measurement.estimate.method` (§6.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EstimateMethod {
    /// One FPM kept as it arrived.
    SingleStep,
    /// The last FPM kept.
    LastStep,
    /// The upper median of the steady samples.
    AdjacentUpperMedian,
}

/// Which FPM a point keeps (§1.11 `_bench_save_current_point`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum RetainedFpm {
    /// Keep every FPM that arrived, unchanged (`single_step`; an admission-only decode FPM then
    /// fails shape validation downstream).
    AsArrived {
        /// FPMs that arrived.
        count: usize,
    },
    /// Keep only the last FPM: all expected samples arrived and there was one steady step.
    LastStep {
        /// Index of the FPM kept.
        index: usize,
    },
    /// A copy of FPM `steady_start` (coordinates of the first steady step) with `wall_time` set
    /// to the upper median of the steady samples `steady_start..steady_end`, and
    /// `kvwarm_giant_median_of = steady_end − steady_start`.
    UpperMedian {
        /// First steady FPM.
        steady_start: usize,
        /// One past the last steady FPM.
        steady_end: usize,
        /// The upper median wall time.
        wall_time: f64,
    },
}

impl RetainedFpm {
    /// The estimate method this retention stands for.
    pub fn method(&self) -> EstimateMethod {
        match self {
            RetainedFpm::AsArrived { .. } => EstimateMethod::SingleStep,
            RetainedFpm::LastStep { .. } => EstimateMethod::LastStep,
            RetainedFpm::UpperMedian { .. } => EstimateMethod::AdjacentUpperMedian,
        }
    }

    /// Indices of the raw samples the estimate reads (§6.6 `raw_sample_indices`).
    pub fn raw_sample_indices(&self) -> Vec<usize> {
        match *self {
            RetainedFpm::AsArrived { count } => (0..count).collect(),
            RetainedFpm::LastStep { index } => vec![index],
            RetainedFpm::UpperMedian {
                steady_start,
                steady_end,
                ..
            } => (steady_start..steady_end).collect(),
        }
    }

    /// `kvwarm_giant_median_of` (median path only).
    pub fn median_of(&self) -> Option<usize> {
        match *self {
            RetainedFpm::UpperMedian {
                steady_start,
                steady_end,
                ..
            } => Some(steady_end - steady_start),
            _ => None,
        }
    }
}

/// §1.11: with `expected_fpms > 2` and at least 2 arrived, the steady samples are
/// `wall_times[1..expected]` (as many as arrived) and the retained wall time is
/// `sorted(walls)[len // 2]` (upper median); else with `expected_fpms > 1` and all arrived, the
/// last FPM; else whatever arrived.
///
/// DECISION: walls are sorted with `f64::total_cmp` so a NaN wall cannot make the choice depend
/// on input order (Python's `sorted` is order-dependent with NaN).
pub fn select_retained(expected_fpms: usize, wall_times: &[f64]) -> RetainedFpm {
    let arrived = wall_times.len();
    if expected_fpms > 2 && arrived >= 2 {
        let steady_end = expected_fpms.min(arrived);
        let mut walls = wall_times[1..steady_end].to_vec();
        walls.sort_by(f64::total_cmp);
        return RetainedFpm::UpperMedian {
            steady_start: 1,
            steady_end,
            wall_time: walls[walls.len() / 2],
        };
    }
    if expected_fpms > 1 && arrived >= expected_fpms {
        return RetainedFpm::LastStep { index: arrived - 1 };
    }
    RetainedFpm::AsArrived { count: arrived }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::ceil_need;
    use super::*;

    #[test]
    fn admission_is_one_token_short() {
        // §10.1 test_decode_injection_admits_one_token_short: 128/2 → [63,63], admission 126.
        let a = decode_admission(2, 128).unwrap();
        assert_eq!(a.context_lengths, vec![64, 64]);
        assert_eq!(a.injected_lengths, vec![63, 63]);
        assert_eq!(a.admission_kv_tokens, 126);
        assert_eq!(a.steady_kv_tokens, 128);
        assert!(!a.context_clamped);
        // §10.1 zero-request test: 48/3 → [15,15,15].
        assert_eq!(decode_admission(3, 48).unwrap().injected_lengths, vec![15, 15, 15]);
    }

    #[test]
    fn ctx_one_is_clamped_and_recorded_at_the_steady_coordinate() {
        // §10.1 test_decode_ctx1_point_is_clamped…: 4/4 → measured at 8, context_clamped.
        let a = decode_admission(4, 4).unwrap();
        assert_eq!(a.injected_lengths, vec![1, 1, 1, 1]);
        assert_eq!(a.steady_kv_tokens, 8);
        assert!(a.context_clamped);
        assert!(decode_admission(4, 3).is_err());
    }

    fn input(real: bool, total: u64, injected: &[u64], mml: u64, usable: u64) -> DecodeStepInput<'_> {
        DecodeStepInput {
            kvwarm_enabled: true,
            kvwarm_real: real,
            total_kv_read_tokens: total,
            injected_lengths: injected,
            max_model_len: mml,
            usable_blocks_with_watermark: usable,
        }
    }

    #[test]
    fn default_is_one_steady_step() {
        let need = ceil_need(16);
        let policy = GiantKvPolicy::default();
        let mut off = input(true, 2_000_000, &[63, 63], 1000, 1000);
        off.kvwarm_enabled = false;
        let one = DecodeStepPlan {
            extra_steps: 1,
            expected_fpms: 2,
        };
        assert_eq!(decode_step_plan(off, policy, &need), one);
        // Fake and below the threshold.
        assert_eq!(
            decode_step_plan(input(false, 128, &[63, 63], 1000, 1000), policy, &need),
            one
        );
    }

    #[test]
    fn real_and_giant_points_repeat() {
        let need = ceil_need(16);
        let policy = GiantKvPolicy::default();
        let three = DecodeStepPlan {
            extra_steps: 3,
            expected_fpms: 4,
        };
        assert_eq!(
            decode_step_plan(input(true, 128, &[63, 63], 1000, 0), policy, &need),
            three
        );
        // Fake at exactly the threshold repeats too (≥).
        assert_eq!(
            decode_step_plan(input(false, 1_000_000, &[63, 63], 1000, 1000), policy, &need),
            three
        );
        let zero_repeats = GiantKvPolicy {
            threshold_tokens: 0,
            repeats: 0,
        };
        assert_eq!(
            decode_step_plan(input(false, 2, &[1], 1000, 1000), zero_repeats, &need),
            DecodeStepPlan {
                extra_steps: 1,
                expected_fpms: 2
            }
        );
    }

    #[test]
    fn repeats_are_clipped_by_model_length() {
        let need = ceil_need(16);
        let policy = GiantKvPolicy::default();
        // max ctx = 63 + 1 = 64: 66 − 1 − 64 = 1; 67 → 2; 60 → floored at 1.
        assert_eq!(
            decode_step_plan(input(true, 128, &[63], 66, 0), policy, &need).extra_steps,
            1
        );
        assert_eq!(
            decode_step_plan(input(true, 128, &[63], 67, 0), policy, &need).extra_steps,
            2
        );
        assert_eq!(
            decode_step_plan(input(true, 128, &[63], 60, 0), policy, &need).extra_steps,
            1
        );
    }

    #[test]
    fn fake_giants_fall_back_when_the_pool_is_short() {
        let need = ceil_need(16);
        let policy = GiantKvPolicy {
            threshold_tokens: 0,
            repeats: 3,
        };
        // Σ ceil((63 + 3) / 16) = 5 + 5 = 10 blocks.
        assert_eq!(
            decode_step_plan(input(false, 128, &[63, 63], 1000, 10), policy, &need).extra_steps,
            3
        );
        assert_eq!(
            decode_step_plan(input(false, 128, &[63, 63], 1000, 9), policy, &need).extra_steps,
            1
        );
        // Real points never fall back on the pool.
        assert_eq!(
            decode_step_plan(input(true, 128, &[63, 63], 1000, 0), policy, &need).extra_steps,
            3
        );
    }

    #[test]
    fn upper_median_of_the_steady_samples() {
        // Expected 4: admission 0.9 then steadies 0.3, 0.1, 0.2 → sorted [0.1,0.2,0.3][1] = 0.2.
        let r = select_retained(4, &[0.9, 0.3, 0.1, 0.2]);
        assert_eq!(
            r,
            RetainedFpm::UpperMedian {
                steady_start: 1,
                steady_end: 4,
                wall_time: 0.2
            }
        );
        assert_eq!(r.method(), EstimateMethod::AdjacentUpperMedian);
        assert_eq!(r.raw_sample_indices(), vec![1, 2, 3]);
        assert_eq!(r.median_of(), Some(3));
        // Two steadies: sorted [0.1, 0.3][1] = 0.3 (upper, not the mean).
        assert_eq!(
            select_retained(4, &[0.9, 0.3, 0.1]),
            RetainedFpm::UpperMedian {
                steady_start: 1,
                steady_end: 3,
                wall_time: 0.3
            }
        );
        // Only one steady arrived: median of one.
        let one = select_retained(4, &[0.9, 0.5]);
        assert_eq!(one.median_of(), Some(1));
        // Extra FPMs beyond the expected count are ignored.
        assert_eq!(
            select_retained(3, &[0.9, 0.4, 0.2, 0.0]),
            RetainedFpm::UpperMedian {
                steady_start: 1,
                steady_end: 3,
                wall_time: 0.4
            }
        );
    }

    #[test]
    fn last_step_and_single_step() {
        let r = select_retained(2, &[0.9, 0.4]);
        assert_eq!(r, RetainedFpm::LastStep { index: 1 });
        assert_eq!(r.raw_sample_indices(), vec![1]);
        assert_eq!(r.method(), EstimateMethod::LastStep);
        // Admission only: kept as arrived.
        assert_eq!(select_retained(2, &[0.9]), RetainedFpm::AsArrived { count: 1 });
        assert_eq!(select_retained(4, &[0.9]), RetainedFpm::AsArrived { count: 1 });
        let prefill = select_retained(1, &[0.7]);
        assert_eq!(prefill.method(), EstimateMethod::SingleStep);
        assert_eq!(prefill.raw_sample_indices(), vec![0]);
        assert_eq!(prefill.median_of(), None);
        assert_eq!(select_retained(1, &[]), RetainedFpm::AsArrived { count: 0 });
    }

    #[test]
    fn method_names_match_the_artifact() {
        assert_eq!(
            serde_json::to_value(EstimateMethod::AdjacentUpperMedian).unwrap(),
            serde_json::json!("adjacent_upper_median")
        );
        assert_eq!(
            serde_json::to_value(EstimateMethod::SingleStep).unwrap(),
            serde_json::json!("single_step")
        );
    }
}
