//! Coverage, benchmark ids, iteration groups and the rank set: the bookkeeping that ties
//! `results[]`, `skipped_points[]`, `iteration_groups[]`, `coverage` and `dp` together
//! (AU-COVERAGE-*, AU-POINT-IDS, AU-GROUP-*, AU-DP-SYNC).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::model::Artifact;
use super::status::close;
use super::Out;

fn counts(a: &Artifact, out: &mut Out) {
    let (completed, skipped) = (a.results.len() as u64, a.skipped_points.len() as u64);
    let c = &a.coverage;
    if c.completed_points != completed {
        out.push(
            "AU-COVERAGE-COUNTS",
            "$.coverage.completed_points",
            format!("{} but results has {completed} row(s)", c.completed_points),
        );
    }
    if c.skipped_points != skipped {
        out.push(
            "AU-COVERAGE-COUNTS",
            "$.coverage.skipped_points",
            format!("{} but skipped_points has {skipped} entr(y/ies)", c.skipped_points),
        );
    }
    if completed + skipped > c.expected_points {
        out.push(
            "AU-COVERAGE-TOTAL",
            "$.coverage.expected_points",
            format!(
                "{completed} measured + {skipped} skipped exceed the {} expected points",
                c.expected_points
            ),
        );
    } else if a.status == "complete" && completed + skipped != c.expected_points {
        out.push(
            "AU-COVERAGE-TOTAL",
            "$.coverage.expected_points",
            format!(
                "a complete run accounts for every point, but {completed} measured + {skipped} skipped of {}",
                c.expected_points
            ),
        );
    }
}

fn ids(a: &Artifact, out: &mut Out) {
    let mut seen = BTreeSet::new();
    for (list, ids) in [
        (
            "results",
            a.results.iter().map(|r| r.point.benchmark_id).collect::<Vec<_>>(),
        ),
        (
            "skipped_points",
            a.skipped_points.iter().map(|s| s.point.benchmark_id).collect(),
        ),
    ] {
        for (i, id) in ids.iter().enumerate() {
            let path = format!("$.{list}[{i}].point.benchmark_id");
            if !seen.insert(*id) {
                out.push("AU-POINT-IDS", path, format!("benchmark_id {id} appears twice"));
            } else if i > 0 && ids[i - 1] > *id {
                out.push(
                    "AU-POINT-IDS",
                    path,
                    format!("benchmark_id {id} after {}: ids follow execution order", ids[i - 1]),
                );
            }
        }
    }
    let n = (a.results.len() + a.skipped_points.len()) as u64;
    let missing: Vec<u64> = (1..=n).filter(|i| !seen.contains(i)).collect();
    let stray: Vec<u64> = seen.iter().copied().filter(|&i| i == 0 || i > n).collect();
    if !missing.is_empty() || !stray.is_empty() {
        out.push(
            "AU-POINT-IDS",
            "$.results",
            format!("the ids of results and skips are not 1..{n}: missing {missing:?}, outside {stray:?}"),
        );
    }
}

fn groups(a: &Artifact, out: &mut Out) {
    if a.iteration_groups.len() != a.results.len() {
        out.push(
            "AU-GROUP-MATCH",
            "$.iteration_groups",
            format!(
                "{} group(s) for {} result(s)",
                a.iteration_groups.len(),
                a.results.len()
            ),
        );
    }
    let ranks: Vec<u64> = (0..a.dp.size).collect();
    for (i, (g, r)) in a.iteration_groups.iter().zip(&a.results).enumerate() {
        let path = format!("$.iteration_groups[{i}]");
        let id = r.point.benchmark_id;
        if g.benchmark_id != id || g.point.benchmark_id != id {
            out.push(
                "AU-GROUP-MATCH",
                format!("{path}.benchmark_id"),
                format!(
                    "group ids {}/{} for result id {id}",
                    g.benchmark_id, g.point.benchmark_id
                ),
            );
        } else if g.point != r.point {
            out.push(
                "AU-GROUP-MATCH",
                format!("{path}.point"),
                format!("the group's point differs from results[{i}].point"),
            );
        }
        if !g.complete {
            out.push(
                "AU-GROUP-MATCH",
                format!("{path}.complete"),
                "a recorded group is complete",
            );
        }
        match g.rank_results.iter().find(|rr| rr.dp_rank == a.dp.rank) {
            Some(rr) if rr.fpms != r.fpms => out.push(
                "AU-GROUP-MATCH",
                format!("{path}.rank_results"),
                format!("rank {}'s FPMs differ from results[{i}].fpms", a.dp.rank),
            ),
            Some(_) => {}
            None => out.push(
                "AU-GROUP-MATCH",
                format!("{path}.rank_results"),
                format!("no result of this rank ({})", a.dp.rank),
            ),
        }

        if g.expected_dp_ranks != ranks {
            out.push(
                "AU-GROUP-RANKS",
                format!("{path}.expected_dp_ranks"),
                format!("{:?} but dp.size is {}", g.expected_dp_ranks, a.dp.size),
            );
        }
        let actual: Vec<u64> = g.rank_results.iter().map(|rr| rr.dp_rank).collect();
        if actual != g.expected_dp_ranks {
            out.push(
                "AU-GROUP-RANKS",
                format!("{path}.rank_results"),
                format!("ranks {actual:?}, expected {:?}", g.expected_dp_ranks),
            );
        }
        for (k, rr) in g.rank_results.iter().enumerate() {
            let p = format!("{path}.rank_results[{k}]");
            if rr.fpms.len() != 1 {
                out.push(
                    "AU-GROUP-RANKS",
                    format!("{p}.fpms"),
                    format!("{} FPMs; every rank keeps one", rr.fpms.len()),
                );
            }
            for (j, f) in rr.fpms.iter().enumerate() {
                if f.counter_id != g.benchmark_id || f.dp_rank != rr.dp_rank {
                    out.push(
                        "AU-GROUP-RANKS",
                        format!("{p}.fpms[{j}]"),
                        format!(
                            "counter_id {} / dp_rank {} in rank {}'s result for benchmark {}",
                            f.counter_id, f.dp_rank, rr.dp_rank, g.benchmark_id
                        ),
                    );
                }
            }
        }
        let max = g
            .rank_results
            .iter()
            .flat_map(|rr| &rr.fpms)
            .map(|f| f.wall_time)
            .fold(0.0, f64::max);
        if !close(max, g.wall_time) {
            out.push(
                "AU-GROUP-WALL",
                format!("{path}.wall_time"),
                format!("{} but the ranks' largest FPM wall time is {max}", g.wall_time),
            );
        }
    }
}

fn dp(a: &Artifact, out: &mut Out) {
    let (d, s) = (&a.dp, &a.synchronization);
    if d.size == 0 || d.rank >= d.size {
        out.push("AU-DP-SYNC", "$.dp", format!("rank {} of size {}", d.rank, d.size));
    }
    if s.enabled != (d.size > 1) {
        out.push(
            "AU-DP-SYNC",
            "$.synchronization.enabled",
            format!("{} with dp.size {}", s.enabled, d.size),
        );
    }
    if s.port.is_some() != (d.size > 1) {
        out.push(
            "AU-DP-SYNC",
            "$.synchronization.port",
            format!("port {:?} with dp.size {}", s.port, d.size),
        );
    }
    if s.coordinator_rank != 0 {
        out.push(
            "AU-DP-SYNC",
            "$.synchronization.coordinator_rank",
            "the coordinator is rank 0",
        );
    }
    let parallel = a.engine.as_ref().and_then(|e| e.get("parallel"));
    for (key, want) in [("data_parallel_rank", d.rank), ("data_parallel_size", d.size)] {
        if let Some(got) = parallel.and_then(|p| p.get(key)).and_then(Value::as_u64) {
            if got != want {
                out.push(
                    "AU-DP-SYNC",
                    format!("$.engine.parallel.{key}"),
                    format!("{got} but dp says {want}"),
                );
            }
        }
    }
}

/// Eager warm-up replicas run first and are discarded on every path, failures
/// included (dynamo_fpm.md §1.6, `_bench_skip_point`; §8.2 bug 26: a failed
/// replica recorded as a skip flips the artifact to unusable).
fn replicas(a: &Artifact, out: &mut Out) {
    const REPLICA: &str = "eager_warmup";
    let rows = a.results.iter().map(|r| ("results", &r.point));
    let skips = a.skipped_points.iter().map(|s| ("skipped_points", &s.point));
    let mut index = BTreeMap::new();
    for (list, p) in rows.chain(skips) {
        let i = index.entry(list).or_insert(0usize);
        if p.has(REPLICA) {
            out.push(
                "AU-REPLICA-KEPT",
                format!("$.{list}[{i}].point.sample_reasons"),
                format!(
                    "benchmark_id {} is an eager warm-up replica, which is discarded, not recorded",
                    p.benchmark_id
                ),
            );
        }
        *i += 1;
    }
}

pub(crate) fn check(a: &Artifact, out: &mut Out) {
    counts(a, out);
    ids(a, out);
    replicas(a, out);
    groups(a, out);
    dp(a, out);
}
