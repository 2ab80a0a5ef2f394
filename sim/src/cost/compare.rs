//! Predicted vs measured: per benchmark point (timed window) and per step.

use schemars::JsonSchema;
use serde::Serialize;

use super::results::{GpuResults, Prediction};

/// One point, predicted and measured.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PointCmp {
    /// Which pair of files it came from (the scenario name, or the file index).
    pub label: String,
    /// The point.
    pub point: u64,
    /// Its batch size.
    pub batch: u64,
    /// Total KV read of its first decode step, in tokens (sum over the batch).
    pub ctx_tokens: u64,
    /// A decode-only point.
    pub decode_only: bool,
    /// Predicted device time (µs).
    pub predicted_us: f64,
    /// Measured device time (µs).
    pub measured_us: f64,
    /// (predicted - measured) / measured, in percent.
    pub error_pct: f64,
    /// The point's retained sample (its last timed step, timed by the device as a step):
    /// predicted and measured device time, and the error in percent.
    pub retained_predicted_us: Option<f64>,
    /// The retained sample's measured time (µs).
    pub retained_measured_us: Option<f64>,
    /// The retained sample's error (%).
    pub retained_error_pct: Option<f64>,
    /// The window's predicted band (%), from a calibrated profile.
    pub band_pct: Option<f64>,
    /// The measured window lies inside its band.
    pub in_band: Option<bool>,
    /// The retained sample's predicted band (%).
    pub retained_band_pct: Option<f64>,
    /// The measured retained sample lies inside its band.
    pub retained_in_band: Option<bool>,
    /// The prediction's verdict on the window's kernel shapes: `calibrated`, `extrapolated` or
    /// `unknown`.
    pub shapes: Option<String>,
}

/// The first step (in program order) whose prediction misses by more than the tolerance.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Divergence {
    /// The step's label.
    pub label: String,
    /// Program step index and plan step.
    pub index: usize,
    /// The step.
    pub step: u64,
    /// Predicted (µs).
    pub predicted_us: f64,
    /// Measured (µs).
    pub measured_us: f64,
    /// Error (%).
    pub error_pct: f64,
}

/// One (prediction, measurement) pair compared.
#[derive(Clone, Debug, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PairCmp {
    /// What was compared.
    pub label: String,
    /// Per point.
    pub points: Vec<PointCmp>,
    /// Steps compared.
    pub steps_compared: usize,
    /// Mean absolute percentage error over the steps.
    pub mape_steps: Option<f64>,
    /// The first step whose error crosses the threshold.
    pub first_divergence: Option<Divergence>,
    /// Steps with a predicted band, and how many of them were measured inside it.
    pub steps_with_band: usize,
    /// Steps measured inside their band.
    pub steps_in_band: usize,
}

fn inside(error_pct: Option<f64>, band_pct: Option<f64>) -> Option<bool> {
    Some(error_pct?.abs() <= band_pct?)
}

/// Why two files cannot be compared.
pub fn check_pair(pred: &Prediction, gpu: &GpuResults) -> Result<(), String> {
    if pred.plan_hash != gpu.plan_hash {
        return Err(format!(
            "the prediction is for plan {} but the GPU results are of plan {}",
            pred.plan_hash, gpu.plan_hash
        ));
    }
    if pred.run != gpu.run {
        return Err(format!(
            "the prediction assumed {:?} but the GPU run was {:?}; predict with the same --synthetic-kv, --moe-input and --time-ops",
            pred.run, gpu.run
        ));
    }
    if pred.steps.len() != gpu.steps.len() {
        return Err(format!(
            "{} predicted steps but {} measured",
            pred.steps.len(),
            gpu.steps.len()
        ));
    }
    Ok(())
}

fn pct(pred: f64, meas: f64) -> f64 {
    if meas > 0.0 {
        100.0 * (pred - meas) / meas
    } else {
        f64::INFINITY
    }
}

/// Compares one checked pair; steps diverge at `tolerance_pct`.
pub fn compare_pair(label: &str, pred: &Prediction, gpu: &GpuResults, tolerance_pct: f64) -> PairCmp {
    let mut points = Vec::new();
    for m in &gpu.points {
        if let Some(p) = pred.points.iter().find(|p| p.point == m.point) {
            let retained_measured_us = p
                .retained_step
                .and_then(|s| gpu.steps.iter().find(|x| x.step == s))
                .map(|x| x.device_us);
            let retained_error_pct = match (p.retained_device_us, retained_measured_us) {
                (Some(a), Some(b)) => Some(pct(a, b)),
                _ => None,
            };
            let error_pct = pct(p.device_us, m.device_us);
            points.push(PointCmp {
                band_pct: p.band_pct,
                in_band: inside(Some(error_pct), p.band_pct),
                retained_band_pct: p.retained_band_pct,
                retained_in_band: inside(retained_error_pct, p.retained_band_pct),
                shapes: p.shapes.clone(),
                retained_predicted_us: p.retained_device_us,
                retained_measured_us,
                retained_error_pct,
                label: label.to_string(),
                point: m.point,
                batch: p.batch,
                ctx_tokens: p.ctx_tokens,
                decode_only: p.decode_only,
                predicted_us: p.device_us,
                measured_us: m.device_us,
                error_pct,
            });
        }
    }
    points.sort_by_key(|p| p.point);
    let mut errs = Vec::new();
    let mut first = None;
    let (mut with_band, mut in_band) = (0, 0);
    for (i, (p, m)) in pred.steps.iter().zip(&gpu.steps).enumerate() {
        if m.device_us <= 0.0 {
            continue;
        }
        let e = pct(p.device_us, m.device_us);
        errs.push(e.abs());
        if let Some(inside) = inside(Some(e), p.band_pct) {
            with_band += 1;
            in_band += usize::from(inside);
        }
        if first.is_none() && e.abs() > tolerance_pct {
            first = Some(Divergence {
                label: label.to_string(),
                index: i,
                step: m.step,
                predicted_us: p.device_us,
                measured_us: m.device_us,
                error_pct: e,
            });
        }
    }
    PairCmp {
        label: label.to_string(),
        steps_compared: errs.len(),
        mape_steps: mean(&errs),
        first_divergence: first,
        points,
        steps_with_band: with_band,
        steps_in_band: in_band,
    }
}

/// Mean of a sample; `None` for none.
pub fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

/// Mean absolute percentage error of points (those `keep` selects).
pub fn mape_points(points: &[PointCmp], keep: impl Fn(&PointCmp) -> bool) -> Option<f64> {
    let errs: Vec<f64> = points.iter().filter(|p| keep(p)).map(|p| p.error_pct.abs()).collect();
    mean(&errs)
}

/// The `n` points with the largest absolute errors, largest first (ties: label, point).
pub fn worst(points: &[PointCmp], n: usize) -> Vec<PointCmp> {
    let mut v = points.to_vec();
    v.sort_by(|a, b| {
        b.error_pct
            .abs()
            .total_cmp(&a.error_pct.abs())
            .then_with(|| a.label.cmp(&b.label))
            .then(a.point.cmp(&b.point))
    });
    v.truncate(n);
    v
}

/// Mean absolute percentage error of the points' retained samples (those `keep` selects).
pub fn mape_retained(points: &[PointCmp], keep: impl Fn(&PointCmp) -> bool) -> Option<f64> {
    let errs: Vec<f64> = points
        .iter()
        .filter(|p| keep(p))
        .filter_map(|p| p.retained_error_pct.map(f64::abs))
        .collect();
    mean(&errs)
}

/// How many measured values fell inside their predicted bands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Coverage {
    /// Values with a band.
    pub total: usize,
    /// Values inside it.
    pub inside: usize,
    /// `inside / total` in percent (`None` without bands).
    pub pct: Option<f64>,
}

impl Coverage {
    /// `inside` of `total` values with a band.
    pub fn new(total: usize, inside: usize) -> Coverage {
        let pct = (total > 0).then(|| 100.0 * inside as f64 / total as f64);
        Coverage { total, inside, pct }
    }

    /// Coverage of `flags` (one per value with a band).
    pub fn of(flags: impl IntoIterator<Item = bool>) -> Coverage {
        let (mut total, mut inside) = (0, 0);
        for f in flags {
            total += 1;
            inside += usize::from(f);
        }
        Coverage::new(total, inside)
    }
}

/// Band coverage of a comparison.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct BandCoverage {
    /// The decode points' retained samples.
    pub retained_decode: Coverage,
    /// The timed windows.
    pub windows: Coverage,
    /// The steps.
    pub steps: Coverage,
}

impl BandCoverage {
    /// Any value had a band.
    pub fn any(&self) -> bool {
        self.retained_decode.total + self.windows.total + self.steps.total > 0
    }
}

/// Band coverage of a comparison: the decode points' retained samples, the windows, the steps.
pub fn band_coverage(pairs: &[PairCmp]) -> BandCoverage {
    let points = || pairs.iter().flat_map(|p| &p.points);
    let steps = Coverage::new(
        pairs.iter().map(|p| p.steps_with_band).sum(),
        pairs.iter().map(|p| p.steps_in_band).sum(),
    );
    BandCoverage {
        retained_decode: Coverage::of(points().filter(|p| p.decode_only).filter_map(|p| p.retained_in_band)),
        windows: Coverage::of(points().filter_map(|p| p.in_band)),
        steps,
    }
}

/// Retained-sample MAPE of the decode points, split by the prediction's verdict on their shapes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ByShapes {
    /// Points whose kernel shapes all lie inside the calibrated ranges.
    pub calibrated: Option<f64>,
    /// Their number.
    pub calibrated_points: usize,
    /// Points with a shape outside them.
    pub extrapolated: Option<f64>,
    /// Their number.
    pub extrapolated_points: usize,
}

/// [`ByShapes`] of `points`.
pub fn by_shapes(points: &[PointCmp]) -> ByShapes {
    let is = |p: &PointCmp, s: &str| p.decode_only && p.shapes.as_deref() == Some(s);
    ByShapes {
        calibrated: mape_retained(points, |p| is(p, "calibrated")),
        calibrated_points: points.iter().filter(|p| is(p, "calibrated")).count(),
        extrapolated: mape_retained(points, |p| is(p, "extrapolated")),
        extrapolated_points: points.iter().filter(|p| is(p, "extrapolated")).count(),
    }
}
