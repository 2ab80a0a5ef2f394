//! The JSON Schema of a calibrated profile's `provenance`, which `kvsim calibrate` builds with
//! `json!` (src/cli/calibrate_cmd.rs): what it was fitted on and how well. Schema only.

#![allow(dead_code)] // never built, only described

use std::collections::BTreeMap;

use schemars::JsonSchema;

/// A profile's `provenance`: what it was fitted on and how well.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Provenance {
    /// The GPU results fitted, in the order given.
    fitted_on: Vec<FittedOn>,
    /// The parameters the fit moved (`--fit`, else all); absent in profiles calibrated before
    /// `--fit` existed.
    fitted_params: Option<Vec<String>>,
    iterations: u64,
    /// MAPE per row kind (`all`, `ops`, `steps`, `windows`) before and after the fit.
    mape_after_pct: BTreeMap<String, f64>,
    mape_before_pct: BTreeMap<String, f64>,
    per_file: Vec<PerFile>,
    prior: f64,
    /// Decode-only steps weighed as much as all steps with prefill (`--balance-steps`); absent
    /// in profiles calibrated before the option existed.
    balance_steps: Option<bool>,
    /// Measurements fitted.
    rows: u64,
    /// The start profile (`--start`).
    start: String,
    /// The start profile's own provenance, when it had one.
    #[serde(default)]
    start_provenance: Option<Box<Provenance>>,
    /// The residual quantile the bands cover (`--band-quantile`); absent before bands existed.
    band_quantile: Option<f64>,
    /// Per class (`step`, `step decode`, `step other`, `window`, ...): the fitted rows' error at
    /// that quantile (`pct`) and how many rows it was taken over.
    bands: Option<Vec<BandSchema>>,
    /// Per kernel shape key and feature: the smallest and largest value measured.
    ranges: Option<Vec<RangeSchema>>,
    /// Per kernel family: the per-op residuals after the fit (runs with `--time-ops`; absent
    /// before issue 21's microbenchmarks).
    families: Option<Vec<super::families::FamilyResidual>>,
}

/// One band.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct BandSchema {
    class: String,
    pct: f64,
    rows: u64,
}

/// One calibrated range.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RangeSchema {
    kernel: String,
    feature: String,
    min: u64,
    max: u64,
}

/// One GPU result the fit used.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct FittedOn {
    file: String,
    plan_hash: String,
    run: FittedRun,
}

/// How that result's run was made.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct FittedRun {
    moe_input: String,
    synthetic_kv: String,
    time_ops: bool,
}

/// The fit's error on one result file.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PerFile {
    file: String,
    mape_ops_pct: Option<f64>,
    mape_steps_pct: Option<f64>,
    mape_windows_pct: Option<f64>,
}
