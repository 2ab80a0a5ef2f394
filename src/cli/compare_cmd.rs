//! `kvsim compare SIM GPU [SIM GPU ...]`: predicted (`kvsim predict`) vs measured
//! (`kvsim replay --backend gpu`) per benchmark point and step: MAPE, worst points, the first
//! step that diverges beyond a tolerance, and an SVG plot.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use super::{read_file, say, CliError};
use kvsim_sim::cost::compare::{
    band_coverage, by_shapes, check_pair, compare_pair, mape_points, mape_retained, worst, PairCmp,
};
use kvsim_sim::cost::results::{read_gpu_results_with, read_prediction};
use kvsim_sim::cost::svg::plot;
use kvsim_sim::output::write_atomic;

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Pairs of files: a prediction (kvsim-predict/1), then the GPU results of the same plan.
    #[arg(required = true, num_args = 2..)]
    pub files: Vec<PathBuf>,
    /// Write the plot (predicted vs measured, and across batch and context) here.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Write the comparison as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// A step diverges when its prediction misses by more than this many percent.
    #[arg(long, default_value_t = 10.0)]
    pub tolerance: f64,
    /// Exit 1 when the MAPE of the decode points exceeds this many percent.
    #[arg(long)]
    pub max_mape: Option<f64>,
    /// Plot the points' retained samples (their last timed step, what the benchmark keeps)
    /// instead of their timed windows.
    #[arg(long)]
    pub plot_retained: bool,
    /// The plot's title.
    #[arg(long, default_value = "kvsim cost model vs GPU")]
    pub title: String,
    /// Plans of the GPU results (repeatable): results of a matching plan are described anew
    /// with this kvsim's model (needed for results made by an older description version).
    #[arg(long)]
    pub plan: Vec<PathBuf>,
}

fn write(path: &std::path::Path, bytes: &[u8]) -> Result<(), CliError> {
    write_atomic(path, bytes).map_err(|e| CliError::Input(format!("cannot write {}: {e}", path.display())))
}

pub fn run(a: CompareArgs) -> Result<ExitCode, CliError> {
    if !a.files.len().is_multiple_of(2) {
        return Err(CliError::Input(format!(
            "give pairs of files (prediction, GPU results); got {} files",
            a.files.len()
        )));
    }
    if !(a.tolerance.is_finite() && a.tolerance >= 0.0) {
        return Err(CliError::Input(format!(
            "--tolerance {} must be finite and >= 0",
            a.tolerance
        )));
    }
    let plans = super::load_plans(&a.plan)?;
    let mut pairs: Vec<PairCmp> = Vec::new();
    for (i, pair) in a.files.chunks(2).enumerate() {
        let (sp, gp) = (pair[0].display().to_string(), pair[1].display().to_string());
        let pred = read_prediction(&sp, &read_file(&pair[0])?).map_err(CliError::Input)?;
        let gpu = read_gpu_results_with(&gp, &read_file(&pair[1])?, &plans).map_err(CliError::Input)?;
        check_pair(&pred, &gpu).map_err(|e| CliError::Input(format!("{sp} vs {gp}: {e}")))?;
        let label = if pred.scenario.is_empty() {
            format!("pair {i}")
        } else {
            let same =
                a.files.chunks(2).count() > 1 && pairs.iter().any(|p: &PairCmp| p.label.starts_with(&pred.scenario));
            if same {
                format!("{} ({i})", pred.scenario)
            } else {
                pred.scenario.clone()
            }
        };
        pairs.push(compare_pair(&label, &pred, &gpu, a.tolerance));
    }
    let points: Vec<_> = pairs.iter().flat_map(|p| p.points.clone()).collect();
    let all = mape_points(&points, |_| true);
    let decode = mape_points(&points, |p| p.decode_only);
    let retained = mape_retained(&points, |p| p.decode_only);
    let fmt = |m: Option<f64>| m.map_or("-".to_string(), |v| format!("{v:.2}%"));
    say(format_args!(
        "{} points: window MAPE {} (decode points: {}, {} of them); retained-sample MAPE of decode points {}",
        points.len(),
        fmt(all),
        fmt(decode),
        points.iter().filter(|p| p.decode_only).count(),
        fmt(retained)
    ))?;
    let coverage = band_coverage(&pairs);
    if coverage.any() {
        let c = |what: &str, c: &kvsim_sim::cost::compare::Coverage| {
            format!("{what} {} of {} ({})", c.inside, c.total, fmt(c.pct))
        };
        say(format_args!(
            "inside their predicted bands: {}, {}, {}",
            c("retained samples of decode points", &coverage.retained_decode),
            c("windows", &coverage.windows),
            c("steps", &coverage.steps)
        ))?;
    } else {
        say("no predicted bands (the profile has none: calibrate it with this kvsim)")?;
    }
    let shapes = by_shapes(&points);
    if shapes.calibrated_points + shapes.extrapolated_points > 0 {
        say(format_args!(
            "retained-sample MAPE of decode points by shapes: calibrated {} ({} points), extrapolated {} ({} points)",
            fmt(shapes.calibrated),
            shapes.calibrated_points,
            fmt(shapes.extrapolated),
            shapes.extrapolated_points
        ))?;
    }
    for p in &pairs {
        say(format_args!(
            "  {}: {} points, window MAPE {} (decode {}), retained {}; {} steps, step MAPE {}",
            p.label,
            p.points.len(),
            fmt(mape_points(&p.points, |_| true)),
            fmt(mape_points(&p.points, |q| q.decode_only)),
            fmt(mape_retained(&p.points, |q| q.decode_only)),
            p.steps_compared,
            fmt(p.mape_steps)
        ))?;
        match &p.first_divergence {
            None => say(format_args!("    no step diverges beyond {}%", a.tolerance))?,
            Some(d) => say(format_args!(
                "    first step beyond {}%: plan step {} (index {}): predicted {:.1} µs, measured {:.1} µs ({:+.1}%)",
                a.tolerance, d.step, d.index, d.predicted_us, d.measured_us, d.error_pct
            ))?,
        }
    }
    say("worst points:")?;
    for w in worst(&points, 5) {
        say(format_args!(
            "  {} point {:>3} batch {:>3} ctx {:>7}: predicted {:>9.1} µs, measured {:>9.1} µs ({:+.2}%)",
            w.label, w.point, w.batch, w.ctx_tokens, w.predicted_us, w.measured_us, w.error_pct
        ))?;
    }
    if let Some(path) = &a.out {
        let v = json!({
            "format": "kvsim-compare/1",
            "tolerance_pct": a.tolerance,
            "mape_points_pct": all,
            "mape_decode_points_pct": decode,
            "mape_retained_decode_points_pct": retained,
            "band_coverage": coverage,
            "retained_decode_by_shapes": shapes,
            "pairs": pairs,
            "worst": worst(&points, 5),
        });
        let mut text = serde_json::to_string_pretty(&v).expect("comparisons serialize");
        text.push('\n');
        write(path, text.as_bytes())?;
    }
    if let Some(path) = &a.svg {
        let (shown, what, m) = if a.plot_retained {
            let r: Vec<_> = points
                .iter()
                .filter_map(|p| {
                    let (pr, me, e) = (p.retained_predicted_us?, p.retained_measured_us?, p.retained_error_pct?);
                    Some(kvsim_sim::cost::compare::PointCmp {
                        predicted_us: pr,
                        measured_us: me,
                        error_pct: e,
                        ..p.clone()
                    })
                })
                .collect();
            (r, "retained samples", retained)
        } else {
            (points.clone(), "timed windows", decode)
        };
        let title = format!("{} — {what}, decode-point MAPE {}", a.title, fmt(m));
        write(path, plot(&shown, &title).as_bytes())?;
    }
    match (a.max_mape, decode) {
        (Some(max), Some(m)) if m > max => {
            say(format_args!("FAILED: decode-point MAPE {m:.2}% > {max}%"))?;
            Ok(ExitCode::from(1))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}
