//! Each decode point's coordinate as the plan states it, per rank, for PL-COORDINATE: kvsim's
//! plans record the grid point of every execution (`benchmark.executions[].point`), recorded
//! plans the admitted lengths the real planner reported (`source.points[]`).

use std::collections::BTreeMap;

use kvsim_core::fpm::sweep::BenchmarkMeta;
use kvsim_core::invariants::planner::PointCoordinate;
use kvsim_core::plan::Plan;

/// Per rank (index), point id → coordinate.
pub fn point_coordinates(plan: &Plan, meta: Option<&BenchmarkMeta>) -> Vec<BTreeMap<u64, PointCoordinate>> {
    let mut by_rank = vec![BTreeMap::new(); plan.scenario.dp_ranks.max(1) as usize];
    let mut put = |rank: u32, point: u64, c: PointCoordinate| {
        if let Some(m) = by_rank.get_mut(rank as usize) {
            m.insert(point, c);
        }
    };
    for e in meta.map(|m| m.executions.as_slice()).unwrap_or_default() {
        put(
            e.rank,
            e.point.benchmark_id,
            PointCoordinate::Grid {
                batch: e.point.batch_size,
                total_kv: e.point.total_kv_read_tokens,
            },
        );
    }
    for p in plan.source.iter().flat_map(|s| &s.points) {
        put(p.rank, p.point, PointCoordinate::Admitted(p.context_lengths.clone()));
    }
    by_rank
}
