//! Attention data parallelism (dynamo_fpm.md §7): the negotiated capacity
//! envelope (§7.1 phase 1, §7.2), V-E's real-KV-only grids (§7.4) and the group
//! verdicts of stages and points (§7.3; §8.1 invariants 34–35).
//!
//! Every rank derives the same plan from negotiated figures only, so the grid and
//! its digest are identical on every rank (one grid serves them all here). A
//! local failure on one rank (a pool that is smaller than its peers', a shadow
//! registration that fails) is shed on that rank at once, but changes the plan only
//! through the group verdict (the AND over ranks), taken before a point is
//! injected, so no rank injects a point its peers skip.

use std::collections::BTreeSet;

use super::{CapacityFallback, SkippedPoint, SweepBuilder};
use crate::fpm::grid::{Grid, GridConfig, PointKey, PointType};
use crate::plan::FaultSpec;

/// `_BenchmarkCapacityEnvelope.common` (§7.1 phase 1): the element-wise minimum
/// of every rank's limits. DECISION: kvsim's ranks share one scenario; a
/// `shrink_pool` fault at step 0 stands for a rank whose profiled pool is smaller
/// (the "per-rank pool difference"), and it enters the envelope, so every rank
/// plans against the smallest pool.
pub(super) fn negotiate_capacity(dp_ranks: u32, faults: &[FaultSpec], cfg: &mut GridConfig) {
    let shrink = (0..dp_ranks)
        .map(|rank| {
            faults
                .iter()
                .map(|f| match f {
                    FaultSpec::ShrinkPool {
                        step: 0,
                        rank: r,
                        blocks,
                        ..
                    } if *r == rank => u64::from(*blocks),
                    _ => 0,
                })
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    let c = &mut cfg.capacity;
    c.usable_blocks_without_watermark = c.usable_blocks_without_watermark.saturating_sub(shrink);
    c.usable_blocks_with_watermark = c.usable_blocks_with_watermark.saturating_sub(shrink);
}

/// V-E (§7.4): under attention DP, decode points the warm-up plan does not cover
/// are dropped from the grid (fake injection on small per-rank pools forks the
/// group), recorded in `capacity_fallbacks` with `benchmark_id: null`; the rest is
/// renumbered contiguously and re-digested; with no decode point left, `decode`
/// is a missing phase. Returns the new grid.
pub(super) fn drop_uncovered(
    p: &mut SweepBuilder<'_>,
    grid: &Grid,
    dropped: Vec<(PointKey, CapacityFallback)>,
) -> Grid {
    let keys: BTreeSet<PointKey> = dropped.iter().map(|(k, _)| k.clone()).collect();
    for (_, mut f) in dropped {
        f.benchmark_id = None;
        p.meta.capacity_fallbacks.push(f);
    }
    let entries: Vec<_> = grid
        .entries
        .iter()
        .filter(|e| !keys.contains(&e.key))
        .cloned()
        .collect();
    let mut missing = grid.missing_phases.clone();
    if !entries.iter().any(|e| e.point.point_type == PointType::Decode) && !missing.contains(&PointType::Decode) {
        missing.push(PointType::Decode);
    }
    let g = Grid::finalize(entries, missing);
    p.meta.grid_digest = g.digest.clone();
    p.meta.expected_points = g.expected_points;
    p.meta.missing_phases = g
        .missing_phases
        .iter()
        .map(|t| {
            serde_json::to_value(t)
                .expect("serializes")
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    g
}

impl SweepBuilder<'_> {
    pub(super) fn attention_dp(&self) -> bool {
        self.s.scenario.dp_ranks > 1
    }

    /// A point the group skips (§7.4 `stage_failed_under_attention_dp`).
    pub(super) fn skip_point(&mut self, benchmark_id: u64, reason: &str) {
        if !self.meta.skipped.iter().any(|k| k.benchmark_id == benchmark_id) {
            self.meta.skipped.push(SkippedPoint {
                benchmark_id,
                reason: reason.to_string(),
            });
        }
    }
}
