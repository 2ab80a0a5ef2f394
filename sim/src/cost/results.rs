//! Reading what `kvsim replay --backend gpu` (`kvsim-replay/1`) and `kvsim predict`
//! (`kvsim-predict/1`) wrote: the fields the cost model needs, checked, with the JSON path of
//! the first problem.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::desc::{StepDesc, DESC_VERSION};
use super::fit::{Measured, Sample};
use super::model::{HostWork, RunShape};
use super::PREDICT_FORMAT;

/// How a run was made, as both formats record it.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct RunInfo {
    pub synthetic_kv: String,
    pub moe_input: String,
    pub time_ops: bool,
    pub sync_windows: bool,
}

#[derive(Clone, Debug, Deserialize)]
pub struct MeasuredOp {
    pub op: usize,
    pub kind: String,
    pub device_us: f64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct MeasuredStep {
    pub step: u64,
    pub device_us: f64,
    #[serde(default)]
    pub ops: Vec<MeasuredOp>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct MeasuredPoint {
    pub point: u64,
    pub step_begin: Option<u64>,
    pub step_end: Option<u64>,
    pub device_us: f64,
    #[serde(default)]
    pub wall_us: Option<f64>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct CostSection {
    pub desc_version: u32,
    pub sm_count: u32,
    #[serde(default)]
    pub resident_ctas: BTreeMap<String, u64>,
    pub steps: Vec<StepDesc>,
}

/// A GPU replay's results, as far as timing goes.
#[derive(Clone, Debug, Deserialize)]
pub struct GpuResults {
    pub format: String,
    pub backend: String,
    pub plan_hash: String,
    pub run: RunInfo,
    pub cost: CostSection,
    pub steps: Vec<MeasuredStep>,
    pub points: Vec<MeasuredPoint>,
}

/// One predicted step.
#[derive(Clone, Debug, Deserialize)]
pub struct PredictedStep {
    pub step: u64,
    pub device_us: f64,
    pub batch: u64,
    pub ctx_tokens: u64,
    pub decode_only: bool,
}

/// One predicted window.
#[derive(Clone, Debug, Deserialize)]
pub struct PredictedPoint {
    pub point: u64,
    pub step_begin: u64,
    pub step_end: u64,
    pub device_us: f64,
    pub wall_us: f64,
    pub batch: u64,
    pub ctx_tokens: u64,
    pub kv_bytes: u64,
    pub decode_only: bool,
}

/// A `kvsim predict` output.
#[derive(Clone, Debug, Deserialize)]
pub struct Prediction {
    pub format: String,
    pub plan_hash: String,
    #[serde(default)]
    pub scenario: String,
    pub profile: serde_json::Value,
    pub run: RunInfo,
    pub steps: Vec<PredictedStep>,
    pub points: Vec<PredictedPoint>,
}

fn parse<T: for<'de> Deserialize<'de>>(name: &str, text: &str) -> Result<T, String> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| format!("{name}: at $.{}: {}", e.path(), e.inner()))
}

/// Reads GPU results; `name` labels errors.
pub fn read_gpu_results(name: &str, text: &str) -> Result<GpuResults, String> {
    let r: GpuResults = parse(name, text)?;
    if r.format != "kvsim-replay/1" || r.backend != "gpu" {
        return Err(format!(
            "{name}: not GPU results (format {:?}, backend {:?}; expected kvsim-replay/1, gpu)",
            r.format, r.backend
        ));
    }
    if r.cost.desc_version != DESC_VERSION {
        return Err(format!(
            "{name}: cost description version {} (this kvsim reads {DESC_VERSION})",
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

/// Reads a prediction.
pub fn read_prediction(name: &str, text: &str) -> Result<Prediction, String> {
    let p: Prediction = parse(name, text)?;
    if p.format != PREDICT_FORMAT {
        return Err(format!("{name}: format {:?}, expected {PREDICT_FORMAT}", p.format));
    }
    Ok(p)
}

impl GpuResults {
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
