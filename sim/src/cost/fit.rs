//! Calibration: non-negative least squares on relative errors, iterated over the critical
//! path.
//!
//! Every measured time (a step, a window, an op) is predicted by [`simulate`] as a [`Lin`]:
//! exactly linear in the parameters along the path the current values choose (which kernel
//! waited for the host, which roofline term was larger). One iteration solves the non-negative
//! least-squares problem of those linearisations, with rows divided by the measured time so
//! that relative errors count; the next iteration re-simulates with the new parameters (the
//! paths may change) and keeps the step only if the true loss went down (else retries with
//! Levenberg-Marquardt damping towards the current values). A
//! weak prior row per parameter (`prior` x relative distance to the starting profile) keeps
//! parameters no measurement exercises (say, the MLA kernel's rates when no plan has MLA) at
//! their starting values instead of zero.

use std::collections::BTreeMap;

use super::desc::{OpDesc, StepDesc};
use super::model::{simulate, Lin, RunShape};
use super::profile::Params;

/// Solves `min ||A x - b||^2, x >= 0` given `G = A^T A` and `c = A^T b` (Lawson-Hanson active
/// set, on columns scaled to unit norm). Columns with a zero diagonal stay at 0.
pub fn nnls_normal(g: &[Vec<f64>], c: &[f64]) -> Vec<f64> {
    let n = c.len();
    assert!(g.len() == n && g.iter().all(|r| r.len() == n), "G is n x n");
    let scale: Vec<f64> = (0..n)
        .map(|j| if g[j][j] > 0.0 { 1.0 / g[j][j].sqrt() } else { 0.0 })
        .collect();
    let gs: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| g[i][j] * scale[i] * scale[j]).collect())
        .collect();
    let cs: Vec<f64> = (0..n).map(|i| c[i] * scale[i]).collect();
    let usable: Vec<bool> = scale.iter().map(|&s| s > 0.0).collect();
    let mut x = vec![0.0; n];
    let mut passive = vec![false; n];
    let tol = 1e-12;
    for _outer in 0..(4 * n + 10) {
        let w: Vec<f64> = (0..n)
            .map(|i| cs[i] - (0..n).map(|j| gs[i][j] * x[j]).sum::<f64>())
            .collect();
        let Some(j) = (0..n)
            .filter(|&j| usable[j] && !passive[j] && w[j] > tol)
            .max_by(|&a, &b| w[a].total_cmp(&w[b]))
        else {
            break;
        };
        passive[j] = true;
        for _inner in 0..(4 * n + 10) {
            let z = solve_passive(&gs, &cs, &passive);
            if (0..n).filter(|&i| passive[i]).all(|i| z[i] > 0.0) {
                x = z;
                break;
            }
            let alpha = (0..n)
                .filter(|&i| passive[i] && z[i] <= 0.0)
                .map(|i| x[i] / (x[i] - z[i]))
                .fold(f64::INFINITY, f64::min);
            for i in 0..n {
                x[i] += alpha * (z[i] - x[i]);
                if passive[i] && x[i] <= tol {
                    passive[i] = false;
                    x[i] = 0.0;
                }
            }
        }
    }
    (0..n).map(|i| x[i] * scale[i]).collect()
}

/// `G[P,P] z = c[P]`, zero outside P (Gaussian elimination with partial pivoting; a tiny
/// ridge keeps collinear columns solvable).
fn solve_passive(g: &[Vec<f64>], c: &[f64], passive: &[bool]) -> Vec<f64> {
    let idx: Vec<usize> = (0..c.len()).filter(|&i| passive[i]).collect();
    let m = idx.len();
    let mut a: Vec<Vec<f64>> = idx
        .iter()
        .map(|&i| {
            let mut row: Vec<f64> = idx.iter().map(|&j| g[i][j]).collect();
            row.push(c[i]);
            row
        })
        .collect();
    for (k, row) in a.iter_mut().enumerate() {
        row[k] += 1e-12;
    }
    for col in 0..m {
        let piv = (col..m)
            .max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))
            .expect("non-empty");
        a.swap(col, piv);
        let d = a[col][col];
        if d.abs() < 1e-300 {
            continue;
        }
        let pivot = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            let f = row[col] / d;
            if r != col && f != 0.0 {
                for (x, p) in row[col..].iter_mut().zip(&pivot[col..]) {
                    *x -= f * p;
                }
            }
        }
    }
    let mut z = vec![0.0; c.len()];
    for (k, &i) in idx.iter().enumerate() {
        z[i] = if a[k][k].abs() < 1e-300 { 0.0 } else { a[k][m] / a[k][k] };
    }
    z
}

/// What one run measured, indexed like its description.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measured {
    /// Per program step: device nanoseconds.
    pub steps: Vec<Option<f64>>,
    /// Per window, by point id: device nanoseconds.
    pub windows: Vec<(u64, f64)>,
    /// Per (program step, op): device nanoseconds (runs with per-op timing).
    pub ops: Vec<(usize, usize, f64)>,
}

/// One run to calibrate on.
#[derive(Clone, Debug)]
pub struct Sample {
    /// The run's name.
    pub name: String,
    /// Its steps' descriptions.
    pub steps: Vec<StepDesc>,
    /// Its run mode.
    pub shape: RunShape,
    /// What was measured.
    pub measured: Measured,
}

/// Which measurements a row is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RowKind {
    /// A step's device time.
    Step,
    /// A window's time.
    Window,
    /// One op's time.
    Op,
}

/// One measured time and its prediction.
#[derive(Clone, Debug)]
pub struct Row {
    /// The sample.
    pub sample: usize,
    /// Which kind of time.
    pub kind: RowKind,
    /// Program step index, point id or (step, op).
    pub at: (usize, usize),
    /// Measured nanoseconds.
    pub measured_ns: f64,
    /// The model's linear form of it.
    pub lin: Lin,
    /// For op rows: what the op launched (`decode`, `moe`, ...); weights balance these. For
    /// step rows: `decode` (decode-only) or `other`, balanced only with
    /// [`FitOptions::balance_steps`].
    pub op_kind: &'static str,
}

/// Rows of every sample under `params`.
pub fn rows(samples: &[Sample], params: &Params) -> Vec<Row> {
    let mut out = Vec::new();
    for (si, s) in samples.iter().enumerate() {
        let t = simulate(&s.steps, params, s.shape);
        for (i, m) in s.measured.steps.iter().enumerate() {
            if let (Some(m), Some(lin)) = (m, t.steps.get(i)) {
                out.push(Row {
                    sample: si,
                    kind: RowKind::Step,
                    at: (i, 0),
                    measured_ns: *m,
                    lin: lin.clone(),
                    op_kind: step_class(s.steps.get(i)),
                });
            }
        }
        for (point, m) in &s.measured.windows {
            if let Some(w) = t.windows.iter().find(|w| w.point == *point) {
                out.push(Row {
                    sample: si,
                    kind: RowKind::Window,
                    at: (*point as usize, 0),
                    measured_ns: *m,
                    lin: w.device.clone(),
                    op_kind: "",
                });
            }
        }
        for (step, op, m) in &s.measured.ops {
            if let Some(o) = t.ops.iter().find(|o| o.step == *step && o.op == *op) {
                out.push(Row {
                    sample: si,
                    kind: RowKind::Op,
                    at: (*step, *op),
                    measured_ns: *m,
                    lin: o.device.clone(),
                    op_kind: s
                        .steps
                        .get(*step)
                        .and_then(|st| st.ops.get(*op))
                        .and_then(|d| d.timing_kind())
                        .unwrap_or(""),
                });
            }
        }
    }
    out.retain(|r| r.measured_ns > 0.0);
    out
}

/// A step row's class: decode-only (what a benchmark point retains) or not.
fn step_class(step: Option<&StepDesc>) -> &'static str {
    match step {
        Some(s) if s.decode_only => "decode",
        _ => "other",
    }
}

/// Mean absolute percentage error of rows (of one kind, or all).
pub fn mape(rows: &[Row], kind: Option<RowKind>) -> Option<f64> {
    let sel: Vec<&Row> = rows.iter().filter(|r| kind.is_none_or(|k| r.kind == k)).collect();
    (!sel.is_empty()).then(|| {
        100.0
            * sel
                .iter()
                .map(|r| (r.lin.value - r.measured_ns).abs() / r.measured_ns)
                .sum::<f64>()
            / sel.len() as f64
    })
}

/// Row weights: every kind of measurement (steps, windows, ops) weighs the same in all, and
/// within ops every kind of op (decode, MoE, writes, zeroing, ...) weighs the same, so the
/// thousands of small per-op rows do not drown the steps, the windows and the big kernels.
/// With `balance_steps`, decode-only steps and steps with prefill weigh the same too, so the
/// many long warm-up prefills do not decide the short decode steps' fixed costs.
fn weights(rows: &[Row], balance_steps: bool) -> Vec<f64> {
    let cell = |r: &Row| match r.kind {
        RowKind::Step if !balance_steps => "",
        _ => r.op_kind,
    };
    let mut cells: BTreeMap<(RowKind, &str), usize> = BTreeMap::new();
    for r in rows {
        *cells.entry((r.kind, cell(r))).or_default() += 1;
    }
    let kinds = |k: RowKind| cells.keys().filter(|c| c.0 == k).count().max(1) as f64;
    let present = [RowKind::Step, RowKind::Window, RowKind::Op]
        .iter()
        .filter(|&&k| cells.keys().any(|c| c.0 == k))
        .count()
        .max(1) as f64;
    let n = rows.len() as f64;
    rows.iter()
        .map(|r| n / present / kinds(r.kind) / cells[&(r.kind, cell(r))] as f64)
        .collect()
}

fn loss(rows: &[Row], p: &[f64], start: &[f64], o: &FitOptions) -> f64 {
    let prior = o.prior;
    let data: f64 = rows
        .iter()
        .zip(weights(rows, o.balance_steps))
        .map(|(r, w)| w * ((r.lin.eval(p) - r.measured_ns) / r.measured_ns).powi(2))
        .sum();
    let reg: f64 = p
        .iter()
        .zip(start)
        .filter(|(_, s)| **s > 0.0)
        .map(|(v, s)| (prior * (v - s) / s).powi(2))
        .sum();
    data + reg
}

/// What [`calibrate`] found.
#[derive(Clone, Debug)]
pub struct FitReport {
    /// The fitted profile parameters.
    pub params: Params,
    /// Solver iterations.
    pub iterations: usize,
    /// Rows fitted.
    pub rows: usize,
    /// MAPE (%) per row kind and overall, before and after.
    pub before: Vec<(String, f64)>,
    /// Parameters after the fit, by name.
    pub after: Vec<(String, f64)>,
}

/// How [`calibrate`] fits.
pub struct FitOptions<'a> {
    /// Weight of the prior row that keeps each parameter near its starting value.
    pub prior: f64,
    /// Most fitting iterations per stage.
    pub max_iterations: usize,
    /// One flag per [`Params::NAMES`]: which parameters move.
    pub free: &'a [bool],
    /// Decode-only steps and steps with prefill weigh the same (see [`weights`]).
    pub balance_steps: bool,
}

/// Fits parameters to the samples' measurements, starting from `start`: first to the per-op
/// times alone (when there are any: each kernel's own cost, with little host interplay), then
/// to everything. Only the parameters `free` marks move (one flag per [`Params::NAMES`]); the
/// others keep their starting values exactly.
pub fn calibrate(samples: &[Sample], start: &Params, o: &FitOptions) -> FitReport {
    assert_eq!(o.free.len(), Params::NAMES.len(), "one flag per parameter");
    let has_ops = rows(samples, start).iter().any(|r| r.kind == RowKind::Op);
    let first = if has_ops {
        calibrate_rows(samples, start, start, Some(RowKind::Op), o).params
    } else {
        start.clone()
    };
    let mut report = calibrate_rows(samples, &first, start, None, o);
    report.before = summary(&rows(samples, start));
    report
}

fn summary(rs: &[Row]) -> Vec<(String, f64)> {
    let mut v = Vec::new();
    for (name, k) in [
        ("steps", Some(RowKind::Step)),
        ("windows", Some(RowKind::Window)),
        ("ops", Some(RowKind::Op)),
        ("all", None),
    ] {
        if let Some(m) = mape(rs, k) {
            v.push((name.to_string(), m));
        }
    }
    v
}

/// One fitting run from `from`, with the prior around `start`, on the rows of `only` (all
/// when `None`), moving the parameters `free` marks.
fn calibrate_rows(
    samples: &[Sample],
    from: &Params,
    start: &Params,
    only: Option<RowKind>,
    o: &FitOptions,
) -> FitReport {
    let (prior, free) = (o.prior, o.free);
    let rows = |s: &[Sample], p: &Params| -> Vec<Row> {
        let mut r = rows(s, p);
        r.retain(|x| only.is_none_or(|k| x.kind == k));
        r
    };
    let p0 = start.to_vec();
    let n = p0.len();
    let first = rows(samples, from);
    let before = summary(&first);
    let mut cur = from.to_vec();
    let mut cur_rows = first;
    let mut cur_loss = loss(&cur_rows, &cur, &p0, o);
    let mut iterations = 0;
    for _ in 0..o.max_iterations {
        iterations += 1;
        // Normal equations of the relative-error rows plus the prior rows.
        let mut g = vec![vec![0.0; n]; n];
        let mut c = vec![0.0; n];
        for (r, w) in cur_rows.iter().zip(weights(&cur_rows, o.balance_steps)) {
            let sw = w.sqrt();
            // Fixed parameters' time is known: it joins the constant side.
            let fixed: f64 = (0..n).filter(|&j| !free[j]).map(|j| r.lin.coef[j] * cur[j]).sum();
            let a: Vec<f64> = (0..n)
                .map(|j| {
                    if free[j] {
                        sw * r.lin.coef[j] / r.measured_ns
                    } else {
                        0.0
                    }
                })
                .collect();
            let b = sw * (1.0 - (r.lin.konst + fixed) / r.measured_ns);
            for i in 0..n {
                if a[i] == 0.0 {
                    continue;
                }
                c[i] += a[i] * b;
                for j in 0..n {
                    g[i][j] += a[i] * a[j];
                }
            }
        }
        for j in 0..n {
            if free[j] && p0[j] > 0.0 {
                let a = prior / p0[j];
                g[j][j] += a * a;
                c[j] += a * prior;
            }
        }
        // Levenberg-Marquardt damping: a step that lands where the paths change too much is
        // retried closer to the current values (damping x diag(G) pulls towards them).
        let mut accepted = false;
        for damping in [0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0] {
            let mut gd = g.clone();
            let mut cd = c.clone();
            for j in 0..n {
                let d = damping * g[j][j];
                gd[j][j] += d;
                cd[j] += d * cur[j];
            }
            let mut trial = nnls_normal(&gd, &cd);
            for j in (0..n).filter(|&j| !free[j]) {
                trial[j] = cur[j];
            }
            let trial_rows = rows(samples, &Params::from_vec(&trial));
            let l = loss(&trial_rows, &trial, &p0, o);
            if l < cur_loss * (1.0 - 1e-9) {
                let gain = (cur_loss - l) / cur_loss.max(1e-300);
                cur = trial;
                cur_rows = trial_rows;
                cur_loss = l;
                accepted = gain > 1e-6;
                break;
            }
        }
        if !accepted {
            break;
        }
    }
    FitReport {
        params: Params::from_vec(&cur),
        iterations,
        rows: cur_rows.len(),
        before,
        after: summary(&cur_rows),
    }
}

/// Fits `host_work_op_ns` and `host_work_token_ns` to the host work the runs measured
/// (relative least squares, non-negative); `None` without measurements.
pub fn fit_host_work(samples: &[Sample]) -> Option<(f64, f64)> {
    let mut g = vec![vec![0.0; 2]; 2];
    let mut c = vec![0.0; 2];
    let mut n = 0;
    for s in samples {
        for op in s.steps.iter().flat_map(|st| &st.ops) {
            if let OpDesc::HostWork {
                tokens,
                measured_ns: Some(ns),
                ..
            } = op
            {
                if *ns == 0 {
                    continue;
                }
                let m = *ns as f64;
                let a = [1.0 / m, *tokens as f64 / m];
                for i in 0..2 {
                    c[i] += a[i];
                    for j in 0..2 {
                        g[i][j] += a[i] * a[j];
                    }
                }
                n += 1;
            }
        }
    }
    (n > 0).then(|| {
        let x = nnls_normal(&g, &c);
        (x[0], x[1])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nnls_recovers_an_exact_nonnegative_solution() {
        // A x = b with x = (2, 0, 0.5): rows of a small, well-conditioned system.
        let a = [[1.0, 2.0, 0.0], [0.0, 1.0, 3.0], [1.0, 0.0, 1.0], [2.0, 1.0, 1.0]];
        let x_true = [2.0, 0.0, 0.5];
        let b: Vec<f64> = a
            .iter()
            .map(|r| r.iter().zip(&x_true).map(|(u, v)| u * v).sum())
            .collect();
        let mut g = vec![vec![0.0; 3]; 3];
        let mut c = vec![0.0; 3];
        for (r, bi) in a.iter().zip(&b) {
            for i in 0..3 {
                c[i] += r[i] * bi;
                for j in 0..3 {
                    g[i][j] += r[i] * r[j];
                }
            }
        }
        let x = nnls_normal(&g, &c);
        for (u, v) in x.iter().zip(&x_true) {
            assert!((u - v).abs() < 1e-9, "{x:?}");
        }
    }

    #[test]
    fn nnls_clamps_at_zero() {
        // min (x - (-1))^2 + (y - 2)^2, x, y >= 0 -> (0, 2).
        let g = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        let c = vec![-1.0, 2.0];
        let x = nnls_normal(&g, &c);
        assert_eq!(x[0], 0.0);
        assert!((x[1] - 2.0).abs() < 1e-9);
    }

    fn step_row(op_kind: &'static str) -> Row {
        Row {
            sample: 0,
            kind: RowKind::Step,
            at: (0, 0),
            measured_ns: 1.0,
            lin: Lin::zero(),
            op_kind,
        }
    }

    #[test]
    fn balanced_steps_give_decode_steps_the_weight_of_all_others() {
        // 2 decode-only steps among 10: alike without balancing; with it, each class sums to
        // half the weight.
        let mut rows = vec![step_row("decode"); 2];
        rows.extend(vec![step_row("other"); 8]);
        assert!(weights(&rows, false).iter().all(|w| (w - 1.0).abs() < 1e-12));
        let w = weights(&rows, true);
        let decode: f64 = w[..2].iter().sum();
        let other: f64 = w[2..].iter().sum();
        assert!((decode - other).abs() < 1e-9 && (decode - 5.0).abs() < 1e-9, "{w:?}");
    }
}
