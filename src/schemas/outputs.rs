//! The JSON of `kvsim predict`, `kvsim compare --out` and `kvsim check --mutant --json`, whose
//! top levels are built with `json!` (sim/src/cost/mod.rs, src/cli/compare_cmd.rs,
//! src/cli/check_cmd.rs). Schema only; their rows are the real types.

#![allow(dead_code)] // never built, only described

use std::collections::BTreeMap;

use kvsim_sim::check::suite::MutantRow;
use kvsim_sim::cost::compare::{BandCoverage, ByShapes, PairCmp, PointCmp};
use kvsim_sim::cost::desc::StepDesc;
use kvsim_sim::cost::Params;
use schemars::JsonSchema;

/// `kvsim-predict/1`.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Prediction {
    /// `kvsim-predict/1`.
    format: String,
    plan_hash: String,
    scenario: String,
    profile: ProfileStamp,
    run: PredictRun,
    model: PredictModel,
    steps: Vec<PredictedStep>,
    points: Vec<PredictedPoint>,
    totals: Totals,
    /// With `--describe`: what the model costs per op.
    cost: Option<Described>,
    /// With `--devices N`: the ranks in lock-step (sim/src/cost/ranks.rs).
    #[serde(default)]
    ranks: Option<PredictedRanks>,
}

/// `--devices N`: the lock-step model's terms.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PredictedRanks {
    ranks: u64,
    devices: u64,
    device_of_rank: Vec<u64>,
    exchange_us: f64,
    lag_step_us: f64,
    message_lag_steps: Vec<u64>,
    model: String,
    steps: Vec<PredictedRankStep>,
    totals: PredictedRankTotals,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PredictedRankStep {
    step: u64,
    /// Each rank's program alone on a device.
    rank_device_us: Vec<f64>,
    /// Its share of its device plus its lag.
    rank_busy_us: Vec<f64>,
    rank_wait_us: Vec<f64>,
    skew_us: f64,
    step_us: f64,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PredictedRankTotals {
    step_us: f64,
    max_skew_us: f64,
    max_skew_step: Option<u64>,
    rank_wait_us: Vec<f64>,
}

/// The profile a prediction came from.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ProfileStamp {
    name: String,
    hash: String,
    sm_count: u32,
    resident_ctas: BTreeMap<String, u64>,
    params: Params,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PredictRun {
    synthetic_kv: String,
    moe_input: String,
    time_ops: bool,
    sync_windows: bool,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PredictModel {
    desc_version: u32,
    host_work: String,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PredictedStep {
    step: u64,
    device_us: f64,
    batch: u64,
    new_tokens: u64,
    ctx_tokens: u64,
    kv_bytes: u64,
    decode_only: bool,
    /// The calibration's band for a step of this kind, in percent (a calibrated profile only).
    band_pct: Option<f64>,
    /// `calibrated`, `extrapolated` or `unknown` (a profile without calibrated ranges).
    shapes: String,
    /// Why the shapes are extrapolated.
    outside: Option<Vec<String>>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PredictedPoint {
    point: u64,
    step_begin: u64,
    step_end: u64,
    device_us: f64,
    wall_us: f64,
    batch: u64,
    ctx_tokens: u64,
    kv_bytes: u64,
    decode_only: bool,
    /// The point's last timed step (its retained sample) and its predicted device time.
    retained_step: Option<u64>,
    retained_device_us: Option<f64>,
    /// The window's band and its retained sample's, in percent (a calibrated profile only).
    band_pct: Option<f64>,
    retained_band_pct: Option<f64>,
    /// Over the window's steps: `calibrated`, `extrapolated` or `unknown`.
    shapes: String,
    /// Why the shapes are extrapolated.
    outside: Option<Vec<String>>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Totals {
    steps: u64,
    device_us: f64,
    notes: u64,
}

/// `--describe`: the description of every step; each op also carries `predicted_us_alone`
/// (added to the op schema by `schemas::predict`).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Described {
    desc_version: u32,
    steps: Vec<DescribedStep>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct DescribedStep {
    step: u64,
    #[schemars(with = "Vec<DescribedOp>")]
    ops: (),
}

/// Placeholder named `DescribedOp` in the definitions: replaced by `OpDesc` plus
/// `predicted_us_alone` in every variant.
#[derive(JsonSchema)]
pub struct DescribedOp {
    placeholder: StepDesc,
}

/// `kvsim-compare/1` (`kvsim compare --out`).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Comparison {
    /// `kvsim-compare/1`.
    format: String,
    tolerance_pct: f64,
    mape_points_pct: Option<f64>,
    mape_decode_points_pct: Option<f64>,
    mape_retained_decode_points_pct: Option<f64>,
    /// Measured values inside their predicted bands: `retained_decode`, `windows`, `steps`.
    band_coverage: BandCoverage,
    /// Retained-sample MAPE of decode points whose shapes were `calibrated` / `extrapolated`.
    retained_decode_by_shapes: ByShapes,
    pairs: Vec<PairCmp>,
    /// The five points predicted worst.
    worst: Vec<PointCmp>,
}

/// `kvsim-check-mutants/1` (`kvsim check --mutant NAME|all --json`).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct MutantsReport {
    /// `kvsim-check-mutants/1`.
    format: String,
    seed: u64,
    cases_per_scenario: u64,
    shard: String,
    mutants: Vec<MutantEntry>,
    killed: u64,
    survived: u64,
}

/// A hunted mutant's row and the command that replays its shrunk plan.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct MutantEntry {
    #[serde(flatten)]
    row: MutantRow,
    replay: Option<String>,
}
