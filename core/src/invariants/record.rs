//! Invariants of the benchmark record a planner attaches to its plan (the
//! artifact's source): checked once the plan's ops ran clean.

use super::{InvariantId, Violation};
use crate::fpm::grid::SampleReason;
use crate::fpm::sweep::ExecutionRecord;

/// AR-REGIME (dynamo_fpm.md §5.2; §8.2 bug 24): a row stamped `kvwarm_real_kv` is
/// labelled `real_*`, a row stamped `kvwarm_fake_fallback` is labelled `fake_*`.
pub fn check_regime_labels(executions: &[ExecutionRecord]) -> Option<Violation> {
    executions.iter().find_map(|e| {
        let reasons = &e.point.sample_reasons;
        let want = if reasons.contains(&SampleReason::KvwarmRealKv) {
            "real_"
        } else if reasons.contains(&SampleReason::KvwarmFakeFallback) {
            "fake_"
        } else {
            return None;
        };
        (!e.kv_seed_regime.starts_with(want)).then(|| Violation {
            id: InvariantId::ArRegime,
            detail: format!(
                "point {} (rank {}) is labelled {} but stamped {want}*",
                e.point.benchmark_id, e.rank, e.kv_seed_regime
            ),
        })
    })
}
