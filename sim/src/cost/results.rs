//! Reading what `kvsim replay --backend gpu` (`kvsim-replay/1`) and `kvsim predict`
//! (`kvsim-predict/1`) wrote: the fields the cost model needs, checked, with the JSON path of
//! the first problem.

use std::collections::BTreeMap;

use serde::Deserialize;

use kvsim_core::device::layout::DeviceLayout;
use kvsim_core::device::program::MoeOp;
use kvsim_core::device::{MoeInput, SyntheticKv};
use kvsim_core::plan::{json_path, Plan};

use super::desc::{describe, DescSource, OpDesc, StepDesc, DESC_VERSION};
use super::fit::{Measured, Sample};
use super::model::{HostWork, RunShape};
use super::routing::{expected_routing, Routing, TokenRouter};
use super::RunOptions;
use super::PREDICT_FORMAT;

/// How a run was made, as both formats record it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct RunInfo {
    /// `--synthetic-kv`.
    pub synthetic_kv: String,
    /// `--moe-input`.
    pub moe_input: String,
    /// `--time-ops`.
    pub time_ops: bool,
    /// Synchronized windows.
    pub sync_windows: bool,
}

/// One op's measured time.
#[derive(Clone, Debug, Deserialize)]
pub struct MeasuredOp {
    /// Its index.
    pub op: usize,
    /// Its kind.
    pub kind: String,
    /// Device time (µs).
    pub device_us: f64,
}

/// One step's measured time.
#[derive(Clone, Debug, Deserialize)]
pub struct MeasuredStep {
    /// The step.
    pub step: u64,
    /// Device time (µs).
    pub device_us: f64,
    /// Per op (with `--time-ops`).
    #[serde(default)]
    pub ops: Vec<MeasuredOp>,
}

/// One point's measured window.
#[derive(Clone, Debug, Deserialize)]
pub struct MeasuredPoint {
    /// The point.
    pub point: u64,
    /// Its first step.
    pub step_begin: Option<u64>,
    /// Its last step.
    pub step_end: Option<u64>,
    /// Device time (µs).
    pub device_us: f64,
    /// Wall time (µs).
    #[serde(default)]
    pub wall_us: Option<f64>,
    /// Host time to issue the window (µs; absent in older results).
    #[serde(default)]
    pub host_us: Option<f64>,
}

/// The cost description of the run.
#[derive(Clone, Debug, Deserialize)]
pub struct CostSection {
    /// Description format version.
    pub desc_version: u32,
    /// SMs.
    pub sm_count: u32,
    /// Resident CTAs per kernel module.
    #[serde(default)]
    pub resident_ctas: BTreeMap<String, u64>,
    /// Per step.
    pub steps: Vec<StepDesc>,
}

/// A GPU replay's results, as far as timing goes.
#[derive(Clone, Debug, Deserialize)]
pub struct GpuResults {
    /// The format tag.
    pub format: String,
    /// The backend.
    pub backend: String,
    /// The plan's digest.
    pub plan_hash: String,
    /// The run mode.
    pub run: RunInfo,
    /// The cost description.
    pub cost: CostSection,
    /// Per step.
    pub steps: Vec<MeasuredStep>,
    /// Per point.
    pub points: Vec<MeasuredPoint>,
}

/// One predicted step.
#[derive(Clone, Debug, Deserialize)]
pub struct PredictedStep {
    /// The step.
    pub step: u64,
    /// Predicted device time (µs).
    pub device_us: f64,
    /// Batch size.
    pub batch: u64,
    /// Context tokens.
    pub ctx_tokens: u64,
    /// A decode-only step.
    pub decode_only: bool,
    /// Its uncertainty band (%), from a calibrated profile.
    #[serde(default)]
    pub band_pct: Option<f64>,
    /// `calibrated`, `extrapolated` or `unknown` (absent in older predictions).
    #[serde(default)]
    pub shapes: Option<String>,
}

/// One predicted window.
#[derive(Clone, Debug, Deserialize)]
pub struct PredictedPoint {
    /// The point.
    pub point: u64,
    /// First step.
    pub step_begin: u64,
    /// Last step.
    pub step_end: u64,
    /// Device time (µs).
    pub device_us: f64,
    /// Wall time (µs).
    pub wall_us: f64,
    /// Batch size.
    pub batch: u64,
    /// Context tokens.
    pub ctx_tokens: u64,
    /// KV bytes read.
    pub kv_bytes: u64,
    /// Decode only.
    pub decode_only: bool,
    /// The point's last timed step (its retained sample) and its predicted device time.
    #[serde(default)]
    pub retained_step: Option<u64>,
    /// The retained sample's device time (µs).
    #[serde(default)]
    pub retained_device_us: Option<f64>,
    /// The window's uncertainty band (%).
    #[serde(default)]
    pub band_pct: Option<f64>,
    /// The retained sample's uncertainty band (%).
    #[serde(default)]
    pub retained_band_pct: Option<f64>,
    /// `calibrated`, `extrapolated` or `unknown` over the window's steps.
    #[serde(default)]
    pub shapes: Option<String>,
}

/// A `kvsim predict` output.
#[derive(Clone, Debug, Deserialize)]
pub struct Prediction {
    /// The format tag.
    pub format: String,
    /// The plan's digest.
    pub plan_hash: String,
    /// The scenario.
    #[serde(default)]
    pub scenario: String,
    /// The profile used.
    pub profile: serde_json::Value,
    /// The run mode.
    pub run: RunInfo,
    /// Per step.
    pub steps: Vec<PredictedStep>,
    /// Per point.
    pub points: Vec<PredictedPoint>,
}

/// What a file is when it is a kvsim output other than `wanted` (`gpu` or `predict`): said
/// before the strict parse, whose first type error would not say it.
fn other_format(text: &str, wanted: &str) -> Option<&'static str> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let backend = v.get("backend").and_then(|b| b.as_str());
    let what = match (v.get("format").and_then(|f| f.as_str())?, backend) {
        ("kvsim-replay/1", Some("sim")) => "a simulator result (`kvsim replay` without `--backend gpu`)",
        ("kvsim-replay/1", Some("gpu")) => "a GPU result",
        (PREDICT_FORMAT, _) => "a prediction (`kvsim predict`)",
        ("kvsim-plan/1", _) => "a plan",
        ("kvsim-profile/1", _) => "a profile",
        _ => return None,
    };
    let is_wanted = match wanted {
        "gpu" => what == "a GPU result",
        _ => what.starts_with("a prediction"),
    };
    (!is_wanted).then_some(what)
}

fn parse<T: for<'de> Deserialize<'de>>(name: &str, text: &str) -> Result<T, String> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de)
        .map_err(|e| format!("{name}: at {}: {}", json_path("$", &e.path().to_string()), e.inner()))
}

/// Reads GPU results; `name` labels errors. Results whose description is of another version
/// are refused unless `plans` holds their plan, which then describes them anew
/// ([`GpuResults::redescribe`]).
pub fn read_gpu_results_with(name: &str, text: &str, plans: &[(String, Plan)]) -> Result<GpuResults, String> {
    if let Some(what) = other_format(text, "gpu") {
        return Err(format!(
            "{name}: this is {what}; a GPU result is needed (`kvsim replay PLAN --backend gpu --out FILE`)"
        ));
    }
    let mut r: GpuResults = parse(name, text)?;
    if r.format != "kvsim-replay/1" || r.backend != "gpu" {
        return Err(format!(
            "{name}: not GPU results (format {:?}, backend {:?}; expected kvsim-replay/1, gpu)",
            r.format, r.backend
        ));
    }
    if let Some((_, plan)) = plans.iter().find(|(h, _)| *h == r.plan_hash) {
        r.redescribe(plan).map_err(|e| format!("{name}: {e}"))?;
    }
    if r.cost.desc_version != DESC_VERSION {
        return Err(format!(
            "{name}: cost description version {} (this kvsim reads {DESC_VERSION}; give the plan with --plan to describe it anew)",
            r.cost.desc_version
        ));
    }
    if r.cost.steps.len() != r.steps.len() {
        return Err(format!(
            "{name}: {} described steps but {} timed steps",
            r.cost.steps.len(),
            r.steps.len()
        ));
    }
    for (i, (d, m)) in r.cost.steps.iter().zip(&r.steps).enumerate() {
        if d.step != m.step {
            return Err(format!(
                "{name}: step {i} is plan step {} in cost but {} in steps",
                d.step, m.step
            ));
        }
        for o in &m.ops {
            let kind = d.ops.get(o.op).and_then(|x| x.timing_kind());
            if kind != Some(o.kind.as_str()) {
                return Err(format!(
                    "{name}: steps[{i}].ops: op {} timed as {} but described as {kind:?}",
                    o.op, o.kind
                ));
            }
        }
    }
    let bad = |v: f64| !v.is_finite() || v < 0.0;
    if let Some(s) = r
        .steps
        .iter()
        .find(|s| bad(s.device_us) || s.ops.iter().any(|o| bad(o.device_us)))
    {
        return Err(format!(
            "{name}: step {}: a device time is negative or not finite",
            s.step
        ));
    }
    if let Some(p) = r.points.iter().find(|p| bad(p.device_us)) {
        return Err(format!(
            "{name}: point {}: device_us is negative or not finite",
            p.point
        ));
    }
    Ok(r)
}

/// Reads GPU results ([`read_gpu_results_with`] without plans).
pub fn read_gpu_results(name: &str, text: &str) -> Result<GpuResults, String> {
    read_gpu_results_with(name, text, &[])
}

/// Reads a prediction.
pub fn read_prediction(name: &str, text: &str) -> Result<Prediction, String> {
    if let Some(what) = other_format(text, "predict") {
        return Err(format!(
            "{name}: this is {what}; a prediction is needed (`kvsim predict PLAN --out FILE`)"
        ));
    }
    let p: Prediction = parse(name, text)?;
    if p.format != PREDICT_FORMAT {
        return Err(format!("{name}: format {:?}, expected {PREDICT_FORMAT}", p.format));
    }
    Ok(p)
}

impl RunInfo {
    /// The run options these results were made with.
    pub fn options(&self) -> Result<RunOptions, String> {
        let mut o = RunOptions::default();
        o.lowering.synthetic_kv = match self.synthetic_kv.as_str() {
            "tokens" => SyntheticKv::Tokens,
            "zero" => SyntheticKv::Zero,
            other => return Err(format!("unknown synthetic_kv {other:?}")),
        };
        o.lowering.moe_input = match self.moe_input.as_str() {
            "token" => MoeInput::Token,
            "hidden" => MoeInput::Hidden,
            other => return Err(format!("unknown moe_input {other:?}")),
        };
        o.time_ops = self.time_ops;
        o.sync_windows = self.sync_windows;
        Ok(o)
    }
}

/// Describes a plan for results made before the current description version: resident CTAs
/// from the results, token routing replicated (exact), other routing and host-work times
/// taken from the old description where it has them.
struct Redescribe<'a> {
    old: &'a [StepDesc],
    resident: &'a BTreeMap<String, u64>,
    router: Option<TokenRouter>,
}

impl DescSource for Redescribe<'_> {
    fn resident(&self, module: &str) -> u64 {
        self.resident.get(module).copied().unwrap_or(1)
    }

    fn routing(&mut self, step: usize, op: usize, m: &MoeOp, layout: &DeviceLayout) -> Routing {
        let moe = layout.moe.expect("MoE ops need a MoE layout");
        if m.hidden.is_empty() {
            let r = self
                .router
                .get_or_insert_with(|| TokenRouter::new(moe.experts, moe.hidden));
            return Routing::from_counts(&r.route_tokens(&m.tokens, m.top_k), "replicated");
        }
        match self.old.get(step).and_then(|s| s.ops.get(op)) {
            Some(OpDesc::Moe { routing, .. }) => routing.clone(),
            _ => expected_routing(m.tokens.len() as u64, m.top_k, moe.experts),
        }
    }
}

impl GpuResults {
    /// Describes the run anew from its plan with the current description version.
    pub fn redescribe(&mut self, plan: &Plan) -> Result<(), String> {
        let opts = self.run.options()?;
        let lowered = kvsim_core::device::lower_plan(plan, &opts.lowering).map_err(|e| e.to_string())?;
        let mut src = Redescribe {
            old: &self.cost.steps,
            resident: &self.cost.resident_ctas,
            router: None,
        };
        let mut steps = describe(plan, &lowered, self.cost.sm_count, &mut src);
        if steps.len() != self.cost.steps.len() {
            return Err(format!(
                "the plan lowers to {} steps, the results have {}",
                steps.len(),
                self.cost.steps.len()
            ));
        }
        for (new, old) in steps.iter_mut().zip(&self.cost.steps) {
            for (a, b) in new.ops.iter_mut().zip(&old.ops) {
                if let (OpDesc::HostWork { measured_ns, .. }, OpDesc::HostWork { measured_ns: m, .. }) = (a, b) {
                    *measured_ns = *m;
                }
            }
        }
        self.cost.steps = steps;
        self.cost.desc_version = DESC_VERSION;
        Ok(())
    }

    /// The run as a calibration sample (host work as the device machine measured it).
    pub fn sample(&self, name: &str) -> Sample {
        let us = |v: f64| v * 1000.0;
        Sample {
            name: name.to_string(),
            steps: self.cost.steps.clone(),
            shape: RunShape {
                time_ops: self.run.time_ops,
                sync_windows: self.run.sync_windows,
                host_work: HostWork::Measured,
            },
            measured: Measured {
                steps: self.steps.iter().map(|s| Some(us(s.device_us))).collect(),
                windows: self.points.iter().map(|p| (p.point, us(p.device_us))).collect(),
                ops: self
                    .steps
                    .iter()
                    .enumerate()
                    .flat_map(|(i, s)| s.ops.iter().map(move |o| (i, o.op, us(o.device_us))))
                    .collect(),
            },
        }
    }
}
