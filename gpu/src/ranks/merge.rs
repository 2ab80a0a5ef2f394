//! Per-rank reports back to one report of the whole program, so the single-device result
//! builder (violations, steps, windows, cost) reads it unchanged.

use crate::executor::{ExecReport, StepTiming};
use kvsim_core::device::ranks::RankProgram;

/// One report over the whole program from `reports[r]`, the report of `parts[r]`: ops and
/// groups renumbered to the whole program's, rows summed, a step's time the slowest rank's
/// (in lock-step the step ends when the last rank's work does), windows from the rank that
/// timed them.
pub fn merge_reports(parts: &[RankProgram], reports: &[&ExecReport]) -> ExecReport {
    let mut out = ExecReport::default();
    let steps = parts.first().map_or(0, |p| p.op_map.len());
    for si in 0..steps {
        let at: Vec<&StepTiming> = reports.iter().filter_map(|r| r.steps.get(si)).collect();
        out.steps.push(StepTiming {
            step: si,
            device_ms: at.iter().map(|s| s.device_ms).fold(0.0, f32::max),
            host_ns: at.iter().map(|s| s.host_ns).max().unwrap_or(0),
        });
    }
    for (p, r) in parts.iter().zip(reports) {
        let op = |step: usize, op: usize| p.op_map.get(step).and_then(|m| m.get(op)).copied().unwrap_or(op);
        out.rows_verified += r.rows_verified;
        out.violations.extend(r.violations.iter().map(|v| {
            let mut v = v.clone();
            v.op = op(v.step, v.op);
            v.group = p.global_group(v.group);
            v
        }));
        out.points.extend(r.points.iter().cloned());
        out.op_timings.extend(r.op_timings.iter().map(|t| {
            let mut t = t.clone();
            t.op = op(t.step, t.op);
            t
        }));
        out.moe_routes.extend(r.moe_routes.iter().map(|m| {
            let mut m = m.clone();
            m.op = op(m.step, m.op);
            m
        }));
        out.decode_outputs.extend(r.decode_outputs.iter().map(|d| {
            let mut d = d.clone();
            d.op = op(d.step, d.op);
            d.group = p.global_group(d.group);
            d
        }));
    }
    // The whole program's order: by step and op (stable, so a rank's order within an op stays).
    out.violations.sort_by_key(|v| (v.step, v.op));
    out.points.sort_by_key(|w| (w.step_begin, w.step_end));
    out.op_timings.sort_by_key(|t| (t.step, t.op));
    out.moe_routes.sort_by_key(|m| (m.step, m.op));
    out.decode_outputs.sort_by_key(|d| (d.step, d.op));
    out
}
