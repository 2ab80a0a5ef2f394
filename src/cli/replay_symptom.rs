//! `kvsim replay FAILING --backend gpu --against FIXED`: what a bug the simulator flags does to
//! the benchmark's numbers on a real device. Both plans run on the GPU; at the point the
//! simulator's finding names, each plan's *recorded* time is compared: what the benchmark
//! would keep for the point (dynamo_fpm.md §1.11: the upper median of two or more steady
//! windows, the one steady window, or the admission window when no steady step ran), each
//! window timed as the benchmark sees it (wall time from an idle device, `sync_windows`).
//! On a PL-NO-POACH finding the poaching request's prefill is compared too
//! (`replay_prefill.rs`): the benchmark times no prefill there, but the executor times every step.

use kvsim_gpu::executor::ExecReport;
use kvsim_gpu::LoweredPlan;
use serde_json::{json, Value};

use super::replay_prefill::Prefills;

/// One timed window of one run.
#[derive(Clone, Debug)]
struct Window {
    point: u64,
    step_begin: u64,
    step_end: u64,
    us: f64,
}

fn windows(l: &LoweredPlan, r: &ExecReport) -> Vec<Window> {
    r.points
        .iter()
        .map(|p| Window {
            point: u64::from(p.point.0),
            step_begin: l.steps.get(p.step_begin).copied().unwrap_or(0),
            step_end: l.steps.get(p.step_end).copied().unwrap_or(0),
            us: p.wall_ns.map_or(f64::from(p.device_ms) * 1000.0, |n| n as f64 / 1000.0),
        })
        .collect()
}

/// What the benchmark records for `point` from one run's windows: (µs, how, windows).
fn recorded(ws: &[Window], point: u64) -> Option<(f64, &'static str, usize)> {
    let mut mine: Vec<&Window> = ws.iter().filter(|w| w.point == point).collect();
    mine.sort_by_key(|w| w.step_begin);
    let (admission, steady) = mine.split_first()?;
    let mut t: Vec<f64> = steady.iter().map(|w| w.us).collect();
    t.sort_by(f64::total_cmp);
    Some(match t.len() {
        0 => (admission.us, "admission window only", 1),
        1 => (t[0], "the steady window", 2),
        n => (t[n / 2], "upper median of the steady windows", n + 1),
    })
}

/// The point a finding at `step` is about: named in its detail ("point N", or a point's
/// request or shadow "pN.r…"), else the window holding the step, else the next window after it.
fn finding_point(step: u64, detail: &str, ws: &[Window]) -> Option<u64> {
    let digits = |rest: &str| {
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse::<u64>().ok())
    };
    let timed = |n: &u64| ws.iter().any(|w| w.point == *n);
    let named = detail.split("point ").nth(1).and_then(digits).filter(timed);
    let request = detail
        .split(|c: char| c.is_whitespace() || c == '"')
        .filter_map(|word| word.strip_prefix('p'))
        .filter(|rest| {
            rest.split_once('.')
                .is_some_and(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
        .find_map(digits)
        .filter(timed);
    named
        .or(request)
        .or_else(|| {
            ws.iter()
                .find(|w| w.step_begin <= step && step <= w.step_end)
                .map(|w| w.point)
        })
        .or_else(|| {
            ws.iter()
                .filter(|w| w.step_begin >= step)
                .min_by_key(|w| w.step_begin)
                .map(|w| w.point)
        })
}

/// The window of `point` that holds `step` (else the point's first window after it), as
/// its ordinal among the point's windows (0: the admission window).
fn finding_window(step: u64, point: u64, ws: &[Window]) -> Option<usize> {
    let mut mine: Vec<&Window> = ws.iter().filter(|w| w.point == point).collect();
    mine.sort_by_key(|w| w.step_begin);
    mine.iter()
        .position(|w| w.step_begin <= step && step <= w.step_end)
        .or_else(|| mine.iter().position(|w| w.step_begin >= step))
}

/// Median and range over the runs of the `k`-th window of `point`.
fn window_over_runs(l: &LoweredPlan, runs: &[ExecReport], point: u64, k: usize) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = runs
        .iter()
        .filter_map(|r| {
            let mut mine: Vec<Window> = windows(l, r).into_iter().filter(|w| w.point == point).collect();
            mine.sort_by_key(|w| w.step_begin);
            mine.get(k).map(|w| w.us)
        })
        .collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some((v[v.len() / 2], v[0], v[v.len() - 1]))
}

/// Median and range of a point's recorded time over the runs.
fn over_runs(l: &LoweredPlan, runs: &[ExecReport], point: u64) -> Option<(f64, f64, f64, &'static str, usize)> {
    let mut v: Vec<(f64, &'static str, usize)> = runs.iter().filter_map(|r| recorded(&windows(l, r), point)).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (lo, hi) = (v[0].0, v[v.len() - 1].0);
    let (med, how, n) = v[v.len() / 2];
    Some((med, lo, hi, how, n))
}

/// The finding the simulator reported on the failing plan.
pub struct SimFinding<'a> {
    pub invariant: &'a str,
    pub step: u64,
    pub detail: &'a str,
}

/// The measured symptom (JSON for the result, one line for the terminal). `prefills`: on a
/// PL-NO-POACH finding, the poaching request's prefill in both plans.
pub fn symptom(
    finding: &SimFinding<'_>,
    failing: (&LoweredPlan, &[ExecReport]),
    fixed: (&LoweredPlan, &[ExecReport]),
    prefills: Option<&Prefills<'_>>,
) -> (Value, String) {
    let prefill = prefills.map(|p| super::replay_prefill::compare(p, failing.1, fixed.1));
    // The prefill clause leads the line; the point's recorded time follows.
    let lead = prefill
        .as_ref()
        .map_or(String::new(), |(_, t)| format!("{t}; at the point, "));
    let with_prefill = |mut v: Value| {
        if let Some((p, _)) = &prefill {
            v["prefill"] = p.clone();
        }
        v
    };
    let ws = windows(failing.0, &failing.1[0]);
    let Some(point) = finding_point(finding.step, finding.detail, &ws) else {
        let line = format!(
            "symptom: none measurable: the failing plan times no window at or after step {} ({})",
            finding.step, finding.invariant
        );
        let v = with_prefill(json!({"point": null, "observed": false, "why": line}));
        let line = match &prefill {
            None => line,
            Some((_, t)) => format!(
                "symptom ({} at step {}): {t}; no point: the failing plan times no window at or after step {}",
                finding.invariant, finding.step, finding.step
            ),
        };
        return (v, line);
    };
    let a = over_runs(failing.0, failing.1, point);
    let b = over_runs(fixed.0, fixed.1, point);
    let (Some(a), Some(b)) = (a, b) else {
        let line = format!(
            "symptom at point {point}: {lead}the {} plan times no window of it",
            if a.is_none() { "failing" } else { "fixed" }
        );
        return (
            with_prefill(json!({"point": point, "observed": false, "why": line})),
            line,
        );
    };
    let recorded = Compared::of((a.0, a.1, a.2), (b.0, b.1, b.2));
    // The window the finding falls in, against the same window of the fixed plan: where a
    // timing bug inflates or shapes a window the benchmark may not keep.
    let window = finding_window(finding.step, point, &ws).and_then(|k| {
        let fa = window_over_runs(failing.0, failing.1, point, k)?;
        let fb = window_over_runs(fixed.0, fixed.1, point, k)?;
        Some((k, Compared::of(fa, fb)))
    });
    let window_text = match &window {
        Some((k, c)) => format!(
            "; its {} at step {}: {:.1} µs vs {:.1} µs fixed: {}",
            if *k == 0 {
                "admission window".to_string()
            } else {
                format!("steady window {k}")
            },
            finding.step,
            c.failing.0,
            c.fixed.0,
            c.text()
        ),
        None => String::new(),
    };
    let line = format!(
        "symptom at point {point} ({} at step {}): {lead}recorded {:.1} µs ({}) vs {:.1} µs fixed ({}): {}{window_text}",
        finding.invariant,
        finding.step,
        a.0,
        a.3,
        b.0,
        b.3,
        recorded.text(),
    );
    let v = with_prefill(json!({
        "point": point,
        "finding": {"invariant": finding.invariant, "step": finding.step, "detail": finding.detail},
        "failing": {"recorded_us": a.0, "range_us": [a.1, a.2], "how": a.3, "windows": a.4},
        "fixed": {"recorded_us": b.0, "range_us": [b.1, b.2], "how": b.3, "windows": b.4},
        "difference_us": recorded.diff,
        "difference_pct": recorded.pct,
        "spread_pct": recorded.spread,
        "observed": recorded.observed,
        "window": window.map(|(k, c)| {
            let mut w = c.json();
            w["ordinal"] = json!(k);
            w
        }),
    }));
    (v, line)
}

/// A failing and a fixed time (median, least, most over the runs) compared.
pub(super) struct Compared {
    pub(super) failing: (f64, f64, f64),
    pub(super) fixed: (f64, f64, f64),
    pub(super) diff: f64,
    pub(super) pct: f64,
    pub(super) spread: f64,
    pub(super) observed: bool,
}

impl Compared {
    pub(super) fn of(failing: (f64, f64, f64), fixed: (f64, f64, f64)) -> Self {
        let diff = failing.0 - fixed.0;
        let base = fixed.0.max(1e-9);
        // Run-to-run range of either plan: a difference inside it is not a measured symptom.
        let range = (failing.2 - failing.1).max(fixed.2 - fixed.1);
        Compared {
            failing,
            fixed,
            diff,
            pct: 100.0 * diff / base,
            spread: 100.0 * range / base,
            observed: diff.abs() > range,
        }
    }

    /// The comparison as JSON: both medians with their ranges, the difference and the spread.
    pub(super) fn json(&self) -> serde_json::Value {
        json!({
            "failing_us": self.failing.0,
            "failing_range_us": [self.failing.1, self.failing.2],
            "fixed_us": self.fixed.0,
            "fixed_range_us": [self.fixed.1, self.fixed.2],
            "difference_us": self.diff,
            "difference_pct": self.pct,
            "spread_pct": self.spread,
            "observed": self.observed,
        })
    }

    pub(super) fn text(&self) -> String {
        format!(
            "{:+.1} µs ({:+.1}%), run-to-run spread {:.1}%{}",
            self.diff,
            self.pct,
            self.spread,
            if self.observed {
                ""
            } else {
                ": within the spread, not observed"
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(point: u64, step: u64, us: f64) -> Window {
        Window {
            point,
            step_begin: step,
            step_end: step,
            us,
        }
    }

    #[test]
    fn the_recorded_sample_is_the_benchmarks() {
        let ws = [
            w(1, 10, 50.0),
            w(1, 11, 30.0),
            w(1, 12, 20.0),
            w(1, 13, 40.0),
            w(2, 20, 9.0),
        ];
        // Three steady windows 30, 20, 40: sorted[len / 2] (§1.11), 30.
        assert_eq!(recorded(&ws, 1), Some((30.0, "upper median of the steady windows", 4)));
        // Two: the upper one.
        assert_eq!(recorded(&ws[..3], 1).map(|r| r.0), Some(30.0));
        assert_eq!(recorded(&ws, 2), Some((9.0, "admission window only", 1)));
        assert_eq!(recorded(&ws, 3), None);
    }

    #[test]
    fn the_finding_names_its_point_or_its_window() {
        let ws = [w(1, 10, 1.0), w(2, 20, 1.0)];
        assert_eq!(
            finding_point(0, "point 2 was measured on its admission step only", &ws),
            Some(2)
        );
        assert_eq!(finding_point(10, "cache_blocks inside the window", &ws), Some(1));
        assert_eq!(finding_point(15, "p9.r0.s1 hits 16 cached tokens", &ws), Some(2));
        assert_eq!(finding_point(30, "late", &ws), None);
        // A point's request or shadow names it.
        assert_eq!(
            finding_point(20, "shadow p1.r0.shadow0 of a covered point failed", &ws),
            Some(1)
        );
        assert_eq!(finding_point(10, "p2.r0.s0 hits 96 cached tokens", &ws), Some(2));
    }

    #[test]
    fn the_finding_window_is_the_one_holding_its_step() {
        let ws = [w(1, 10, 1.0), w(1, 12, 1.0), w(1, 14, 1.0), w(2, 20, 1.0)];
        assert_eq!(finding_window(10, 1, &ws), Some(0), "the admission window");
        assert_eq!(finding_window(12, 1, &ws), Some(1));
        assert_eq!(finding_window(13, 1, &ws), Some(2), "the next window of the point");
        assert_eq!(finding_window(15, 1, &ws), None);
    }

    #[test]
    fn a_difference_inside_the_run_to_run_range_is_not_observed() {
        let c = Compared::of((110.0, 108.0, 112.0), (100.0, 99.0, 101.0));
        assert!(c.observed);
        assert!((c.pct - 10.0).abs() < 1e-9 && (c.spread - 4.0).abs() < 1e-9);
        assert!(!Compared::of((101.0, 95.0, 105.0), (100.0, 99.0, 101.0)).observed);
    }
}
