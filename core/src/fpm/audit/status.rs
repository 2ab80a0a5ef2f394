//! The run's outcome and its self-description: `status`, `error`, `stop_reason`, `valid`,
//! `usable`, `timing_valid` and the timing sums, recomputed the way `_bench_write_results`
//! computes them (AU-RUN-*, AU-STATUS-*, AU-TIMING-*).

use super::model::Artifact;
use super::Out;

/// Two float sums that went through JSON once agree to a relative 1e-9.
pub(crate) fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 + 1e-9 * a.abs().max(b.abs())
}

fn truthy(s: &Option<String>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

pub(crate) fn check(a: &Artifact, out: &mut Out) {
    let completed = a.results.len() as u64;
    let skipped = a.skipped_points.len() as u64;
    let groups = a.iteration_groups.len() as u64;
    let coverage_complete = completed == a.coverage.expected_points;
    let groups_ok = groups == completed && a.iteration_groups.iter().all(|g| g.complete);

    match a.status.as_str() {
        "failed" => out.push(
            "AU-RUN-FAILED",
            "$.status",
            format!(
                "the run failed: {}",
                a.error.as_deref().unwrap_or("(no error recorded)")
            ),
        ),
        "partial" => out.push(
            "AU-RUN-PARTIAL",
            "$.status",
            format!(
                "the run stopped early ({}): {completed} of {} points measured",
                a.stop_reason.as_deref().unwrap_or("no stop reason"),
                a.coverage.expected_points
            ),
        ),
        _ => {
            let mut gates = Vec::new();
            if !coverage_complete {
                gates.push(format!("{completed} of {} points measured", a.coverage.expected_points));
            }
            if skipped > 0 {
                gates.push(format!("{skipped} skipped point(s)"));
            }
            if !a.missing_phases.is_empty() {
                gates.push(format!("missing phase(s) {}", a.missing_phases.join(", ")));
            }
            if !a.timing_valid {
                gates.push("timing not valid".into());
            }
            if completed == 0 {
                gates.push("no measured point".into());
            }
            if !a.valid || !a.usable {
                out.push(
                    "AU-RUN-INVALID",
                    "$.valid",
                    format!(
                        "complete run with valid={} usable={}: {}",
                        a.valid,
                        a.usable,
                        gates.join("; ")
                    ),
                );
            }
        }
    }

    if (a.status == "failed") != a.error.is_some() {
        out.push(
            "AU-STATUS-ERROR",
            "$.error",
            format!(
                "status is {:?} but error is {}",
                a.status,
                if a.error.is_some() { "set" } else { "null" }
            ),
        );
    }
    if a.status == "partial" {
        if a.stop_reason.is_none() {
            out.push("AU-STATUS-STOP", "$.stop_reason", "a partial run names its stop reason");
        }
        if coverage_complete {
            out.push(
                "AU-STATUS-STOP",
                "$.status",
                "a partial run has every point measured (the writer says complete)",
            );
        }
    } else if let Some(r) = &a.stop_reason {
        out.push(
            "AU-STATUS-STOP",
            "$.stop_reason",
            format!("stop_reason {r:?} on a {:?} run (only partial runs keep it)", a.status),
        );
    }

    let valid = coverage_complete
        && groups_ok
        && skipped == 0
        && a.missing_phases.is_empty()
        && a.error.is_none()
        && a.timing_valid;
    if a.valid != valid {
        out.push(
            "AU-STATUS-VALID",
            "$.valid",
            format!("valid is {} but the writer's formula gives {valid}", a.valid),
        );
    }
    let usable = a.error.is_none()
        && completed > 0
        && groups_ok
        && skipped == 0
        && a.missing_phases.is_empty()
        && a.timing_valid;
    if a.usable != usable {
        out.push(
            "AU-STATUS-USABLE",
            "$.usable",
            format!("usable is {} but the writer's formula gives {usable}", a.usable),
        );
    }

    let t = &a.timing;
    let timing_valid = truthy(&t.started_at)
        && truthy(&t.completed_at)
        && t.measured_iteration_seconds <= t.benchmark_elapsed_seconds + 1e-12;
    if a.timing_valid != timing_valid {
        out.push(
            "AU-TIMING-VALID",
            "$.timing_valid",
            format!(
                "timing_valid is {} but started/completed/measured {} <= elapsed {} gives {timing_valid}",
                a.timing_valid, t.measured_iteration_seconds, t.benchmark_elapsed_seconds
            ),
        );
    }
    if t.benchmark_elapsed_seconds < 0.0 {
        out.push(
            "AU-TIMING-VALID",
            "$.timing.benchmark_elapsed_seconds",
            "elapsed time is negative",
        );
    }
    let sum: f64 = a.iteration_groups.iter().map(|g| g.wall_time).sum();
    if !close(sum, t.measured_iteration_seconds) {
        out.push(
            "AU-TIMING-SUM",
            "$.timing.measured_iteration_seconds",
            format!(
                "{} but the groups' wall times sum to {sum}",
                t.measured_iteration_seconds
            ),
        );
    }
}
