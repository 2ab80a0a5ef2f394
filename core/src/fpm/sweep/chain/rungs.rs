//! Rung planning (§3.1 steps 3–5): each batch size's chain depth and the points it covers.

use super::registration::shadow_tail_blocks;
use crate::bugs::BugMutant;
use crate::fpm::capacity::LayoutNeed;
use crate::fpm::grid::{
    decode_admission, BenchmarkPoint, BlockNeed, BlockNeedQuery, DecodeAdmission, Grid, GridConfig, PointKey, PointType,
};
use crate::fpm::sweep::{dp, CapacityFallback, SweepBuilder, SweepError};

/// One decode point with its admission and whether the rung plan covers it.
pub(super) struct Point {
    pub(super) key: PointKey,
    pub(super) point: BenchmarkPoint,
    pub(super) adm: DecodeAdmission,
    pub(super) covered: bool,
}

/// What sizes a rung: every point's margin, the depth cap and the shadow tails.
pub(super) struct RungSizing<'a> {
    need: &'a LayoutNeed,
    /// Margin = point need = 1 + repeats for every point (repeats floored at 1).
    point_need: u64,
    depth_cap: u64,
    /// Shadow-tail blocks reserved per request.
    tail: u64,
}

impl<'a> RungSizing<'a> {
    pub(super) fn new(p: &SweepBuilder<'_>, need: &'a LayoutNeed) -> RungSizing<'a> {
        let s = p.s;
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
        RungSizing {
            need,
            point_need,
            depth_cap,
            tail,
        }
    }

    /// A chain's blocks at `depth`.
    fn blocks(&self, depth: u64) -> u64 {
        self.need.blocks_per_req(BlockNeedQuery {
            num_tokens: depth,
            has_cache_hit: false,
            apply_admission_cap: true,
        })
    }

    /// The depth a point whose deepest request injects `max_inj` tokens wants.
    fn want(&self, max_inj: u64) -> u64 {
        (max_inj + self.point_need).min(self.depth_cap)
    }
}

/// The deepest injected context of a point.
fn max_injected(pt: &Point) -> u64 {
    pt.adm.injected_lengths.iter().copied().max().unwrap_or(1)
}

/// Every decode point of the grid with its admission, none covered yet.
pub(super) fn decode_points(grid: &Grid) -> Result<Vec<Point>, SweepError> {
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
    Ok(points)
}

/// The depth of rung `b` (0: none, or dropped).
pub(super) fn rung_depth(rungs: &[(u64, u64)], b: u64) -> u64 {
    rungs.iter().find(|(x, _)| *x == b).map_or(0, |r| r.1)
}

/// Rung depths (§3.1 steps 3–4), as (batch, depth) in first-seen order: want =
/// min(max injected + margin, cap); the depth is trimmed until B chains plus B
/// shadow tails fit the usable pool.
pub(super) fn rung_depths(
    p: &SweepBuilder<'_>,
    cfg: &GridConfig,
    sizing: &RungSizing<'_>,
    points: &[Point],
) -> Vec<(u64, u64)> {
    let mut rungs: Vec<(u64, u64)> = Vec::new();
    for pt in points {
        let want = sizing.want(max_injected(pt));
        match rungs.iter_mut().find(|(b, _)| *b == pt.point.batch_size) {
            Some((_, d)) => *d = (*d).max(want),
            None => rungs.push((pt.point.batch_size, want)),
        }
    }
    let s = p.s;
    let slot_budget = !p.bug(BugMutant::RungSlotBudget);
    let max_running = u64::from(s.scenario.scheduler.max_num_seqs);
    let attention_dp = p.attention_dp();
    for (b, depth) in rungs.iter_mut() {
        let mut usable = cfg.grid_usable_blocks(*b, true);
        if attention_dp {
            // §7.4: the plan trim keeps an 85 % pool margin under attention DP.
            // DECISION: part II's single-rank trim keeps the whole usable pool.
            usable = usable * 85 / 100;
        }
        let fits = |d: u64| (sizing.blocks(d) + sizing.tail) * *b <= usable;
        if slot_budget && 2 * *b > max_running {
            // V-E slot budget (§3.1 step 4; §8.2 bug 25): B parked chains and B
            // shadows must fit max_num_running_reqs; the rung is dropped.
            *depth = 0;
        } else if !fits(*depth) {
            *depth = trimmed_depth(*depth, fits);
        }
    }
    rungs
}

/// DECISION: the trim loop's result computed by bisection (footprints grow with
/// depth); below depth 8 the rung falls back (V-C) and gets depth 0.
fn trimmed_depth(depth: u64, fits: impl Fn(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (8u64, depth);
    if !fits(lo) {
        return 0;
    }
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

/// `_kvwarm_plan_covers` (§3.1) for every point. An uncovered point over the pool
/// is a capacity fallback; under attention DP (§7.4: real KV only) the uncovered
/// points are dropped and the rest renumbered.
pub(super) fn mark_covered(
    p: &mut SweepBuilder<'_>,
    grid: &Grid,
    cfg: &GridConfig,
    sizing: &RungSizing<'_>,
    rungs: &[(u64, u64)],
    points: &mut Vec<Point>,
) {
    let attention_dp = p.attention_dp();
    let mut dropped = Vec::new();
    for pt in points.iter_mut() {
        let depth = rung_depth(rungs, pt.point.batch_size);
        let max_inj = max_injected(pt);
        // `_kvwarm_plan_covers` (§3.1).
        pt.covered = depth > 0 && max_inj + sizing.point_need <= depth;
        if !pt.covered {
            let b = pt.point.batch_size;
            let want = sizing.want(max_inj);
            let usable = cfg.grid_usable_blocks(b, true);
            let required = (sizing.blocks(want) + sizing.tail) * b;
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
        let g = dp::drop_uncovered(p, grid, dropped);
        points.retain(|pt| pt.covered);
        for pt in points.iter_mut() {
            pt.point.benchmark_id = g.find(&pt.key).expect("kept").point.benchmark_id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::trimmed_depth;
    use std::cell::Cell;

    #[test]
    fn the_trim_finds_the_deepest_fitting_depth_by_bisection() {
        // (depth wanted, deepest that fits): the answer is that depth (capped at the
        // wanted one), or 0 below depth 8.
        let cases = [
            (1 << 20, 300_000),
            (1 << 20, 8),
            (1 << 20, 7),
            (100, 99),
            (100, 100),
            (9, 8),
            (40, 23),
        ];
        for (depth, limit) in cases {
            let probes = Cell::new(0u32);
            let fits = |d: u64| {
                probes.set(probes.get() + 1);
                d <= limit
            };
            let want = if limit < 8 { 0 } else { limit.min(depth) };
            assert_eq!(trimmed_depth(depth, fits), want, "depth {depth}, fits up to {limit}");
            // One probe at depth 8, then one per halving of [8, depth].
            let halvings = u64::BITS - (depth - 8).leading_zeros();
            assert!(
                probes.get() <= 1 + halvings,
                "depth {depth}, fits up to {limit}: {} probes",
                probes.get()
            );
        }
    }
}
