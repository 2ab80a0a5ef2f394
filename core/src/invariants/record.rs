//! Invariants of the benchmark record a planner attaches to its plan (the
//! artifact's source): checked once the plan's ops ran clean. The record's rows come in
//! as [`RegimeRow`]s, so the invariants do not depend on the planners' types.

use super::{InvariantId, Violation};

/// What a row's `sample_reasons` stamp says about its KV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegimeStamp {
    /// `kvwarm_real_kv`
    RealKv,
    /// `kvwarm_fake_fallback`
    FakeFallback,
}

/// One benchmark row as AR-REGIME reads it.
#[derive(Clone, Copy, Debug)]
pub struct RegimeRow<'a> {
    /// The point.
    pub benchmark_id: u64,
    /// The rank.
    pub rank: u32,
    /// `kv_seed_regime`
    pub regime: &'a str,
    /// The stamp on the point's reasons, if any.
    pub stamp: Option<RegimeStamp>,
}

/// AR-REGIME (dynamo_fpm.md §5.2; §8.2 bug 24): a row stamped `kvwarm_real_kv` is
/// labelled `real_*`, a row stamped `kvwarm_fake_fallback` is labelled `fake_*`.
pub fn check_regime_labels<'a>(rows: impl IntoIterator<Item = RegimeRow<'a>>) -> Option<Violation> {
    rows.into_iter().find_map(|r| {
        let want = match r.stamp? {
            RegimeStamp::RealKv => "real_",
            RegimeStamp::FakeFallback => "fake_",
        };
        (!r.regime.starts_with(want)).then(|| Violation {
            id: InvariantId::ArRegime,
            detail: format!(
                "point {} (rank {}) is labelled {} but stamped {want}*",
                r.benchmark_id, r.rank, r.regime
            ),
        })
    })
}
