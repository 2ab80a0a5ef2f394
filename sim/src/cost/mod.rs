//! The cost model: what a plan's steps, timed windows and benchmark points cost on the GPU
//! backend, over a hardware [`Profile`] (docs/timing.md).
//!
//! - [`desc`]: what the backend executes per step (bytes, CTAs, expert routing, host work);
//! - [`routing`]: which experts a MoE op's tokens choose;
//! - [`model`]: the two-clock stream replay with per-kernel rooflines ([`simulate`]);
//! - [`fit`]: calibration (non-negative least squares along the critical path);
//! - [`results`]: reading GPU results (`kvsim-replay/1`) and predictions (`kvsim-predict/1`);
//! - [`bands`]: uncertainty bands and calibrated ranges from a calibration's residuals;
//! - [`compare`] and [`svg`]: predicted vs measured, and the plot.
//!
//! Pure functions of their inputs: no clocks, ordered containers, the same input gives the
//! same bytes.

pub mod bands;
pub mod compare;
pub mod deal_table;
pub mod desc;
pub mod families;
pub mod fit;
pub mod host_scale;
pub mod microbench;
pub mod model;
pub mod profile;
pub mod provenance;
pub mod ranks;
pub mod results;
pub mod routing;
pub mod svg;

use std::collections::BTreeSet;

use kvsim_core::device::layout::DeviceLayout;
use kvsim_core::device::program::MoeOp;
use kvsim_core::device::{lower_plan, LowerOptions, LoweredPlan, MoeInput, SyntheticKv};
use kvsim_core::plan::Plan;

use serde_json::{json, Value};

pub use desc::{describe, OpDesc, StepDesc};
pub use model::{simulate, HostWork, Lin, RunShape, Timeline};
pub use profile::{load_profile, Params, Profile};
pub use routing::Routing;

/// The prediction format tag.
pub const PREDICT_FORMAT: &str = "kvsim-predict/1";

/// MoE ops with more tokens than this get the expected routing instead of the replicated one
/// (replication costs experts x hidden multiply-adds per distinct token).
pub const EXACT_ROUTING_MAX_TOKENS: usize = 4096;

/// Describes a plan from the plan alone: resident CTAs from the profile, token routing
/// replicated, hidden-state routing expected.
pub struct PlanSource<'a> {
    profile: &'a Profile,
    router: Option<routing::TokenRouter>,
}

impl<'a> PlanSource<'a> {
    /// A cost model with `profile`.
    pub fn new(profile: &'a Profile) -> Self {
        PlanSource { profile, router: None }
    }
}

impl desc::DescSource for PlanSource<'_> {
    fn resident(&self, module: &str) -> u64 {
        self.profile.resident(module)
    }

    fn routing(&mut self, _step: usize, _op: usize, m: &MoeOp, layout: &DeviceLayout) -> Routing {
        let moe = layout.moe.expect("MoE ops need a MoE layout");
        if !m.hidden.is_empty() || m.tokens.len() > EXACT_ROUTING_MAX_TOKENS {
            return routing::expected_routing(m.tokens.len() as u64, m.top_k, moe.experts);
        }
        let router = self
            .router
            .get_or_insert_with(|| routing::TokenRouter::new(moe.experts, moe.hidden));
        Routing::from_counts(&router.route_tokens(&m.tokens, m.top_k), "replicated")
    }
}

/// How a run was (or will be) made: the lowering and the executor options the model replays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// How the plan is lowered.
    pub lowering: LowerOptions,
    /// Per-op timing events.
    pub time_ops: bool,
    /// Synchronize at window edges.
    pub sync_windows: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            lowering: LowerOptions::default(),
            time_ops: false,
            sync_windows: true,
        }
    }
}

/// The `--synthetic-kv` name.
pub fn synthetic_kv_name(s: SyntheticKv) -> &'static str {
    match s {
        SyntheticKv::Tokens => "tokens",
        SyntheticKv::Zero => "zero",
    }
}

/// The `--moe-input` name.
pub fn moe_input_name(m: MoeInput) -> &'static str {
    match m {
        MoeInput::Token => "token",
        MoeInput::Hidden => "hidden",
    }
}

/// What a result records about how it was made (compared by `kvsim compare`).
pub fn run_json(opts: &RunOptions) -> Value {
    json!({
        "synthetic_kv": synthetic_kv_name(opts.lowering.synthetic_kv),
        "moe_input": moe_input_name(opts.lowering.moe_input),
        "time_ops": opts.time_ops,
        "sync_windows": opts.sync_windows,
    })
}

/// Lowers and describes `plan` from the plan alone.
pub fn describe_plan(
    plan: &Plan,
    profile: &Profile,
    opts: &RunOptions,
) -> Result<(LoweredPlan, Vec<StepDesc>), String> {
    let lowered = lower_plan(plan, &opts.lowering).map_err(|e| e.to_string())?;
    let mut src = PlanSource::new(profile);
    let mut steps = describe(plan, &lowered, profile.sm_count, &mut src);
    desc::forget_measurements(&mut steps);
    Ok((lowered, steps))
}

fn us(ns: f64) -> f64 {
    (ns * 1e-3 * 1e4).round() / 1e4
}

/// Per window: the program steps it spans, summed over its decoded requests.
fn window_json(w: &model::WindowTime, steps: &[StepDesc]) -> Value {
    let span = &steps[w.step_begin..=w.step_end.min(steps.len() - 1)];
    let first = span.iter().find(|s| s.batch > 0);
    json!({
        "point": w.point,
        "step_begin": steps[w.step_begin].step,
        "step_end": steps[w.step_end].step,
        "device_us": us(w.device.value),
        "wall_us": us(w.wall.value),
        "batch": first.map_or(0, |s| s.batch),
        "ctx_tokens": first.map_or(0, |s| s.ctx_tokens),
        "kv_bytes": span.iter().map(|s| s.kv_bytes).sum::<u64>(),
        "decode_only": span.iter().all(|s| s.decode_only || s.batch == 0) && first.is_some(),
    })
}

/// `shapes`: `calibrated` (every kernel shape inside the profile's calibrated ranges),
/// `extrapolated` (then `outside` says which lie outside), or `unknown` (a profile without ranges).
fn shapes_json(v: &mut Value, outside: Option<&BTreeSet<String>>) {
    v["shapes"] = json!(match outside {
        None => "unknown",
        Some(o) if o.is_empty() => "calibrated",
        Some(_) => "extrapolated",
    });
    if let Some(o) = outside.filter(|o| !o.is_empty()) {
        v["outside"] = json!(o);
    }
}

/// Per benchmark point: the plan step of its last timed window (the sample a two-step decode
/// point keeps, dynamo_fpm.md §1.11).
pub fn retained_steps(plan: &Plan) -> std::collections::BTreeMap<u64, u64> {
    let mut out = std::collections::BTreeMap::new();
    for st in &plan.steps {
        for op in &st.ops {
            if let kvsim_core::plan::PlanOp::BeginTimed { point } = op {
                let e = out.entry(*point).or_insert(st.step);
                *e = (*e).max(st.step);
            }
        }
    }
    out
}

/// The prediction for `plan` (`kvsim-predict/1`).
pub fn predict(plan: &Plan, plan_hash: &str, profile: &Profile, opts: &RunOptions) -> Result<Value, String> {
    let (lowered, steps) = describe_plan(plan, profile, opts)?;
    let shape = RunShape {
        time_ops: opts.time_ops,
        sync_windows: opts.sync_windows,
        host_work: HostWork::Predicted,
    };
    let t = simulate(&steps, &profile.params, shape);
    let cal = bands::Calibration::of(profile);
    let outside: Vec<Option<BTreeSet<String>>> = steps
        .iter()
        .map(|s| cal.as_ref().map(|c| bands::outside(s, &c.ranges)))
        .collect();
    let step_rows: Vec<Value> = steps
        .iter()
        .zip(&t.steps)
        .zip(&outside)
        .map(|((s, l), out)| {
            let mut v = json!({
                "step": s.step,
                "device_us": us(l.value),
                "batch": s.batch,
                "new_tokens": s.new_tokens,
                "ctx_tokens": s.ctx_tokens,
                "kv_bytes": s.kv_bytes,
                "decode_only": s.decode_only,
            });
            if let Some(c) = &cal {
                v["band_pct"] = json!(c.band("step", s.decode_only));
            }
            shapes_json(&mut v, out.as_ref());
            v
        })
        .collect();
    let retained = retained_steps(plan);
    let points: Vec<Value> = t
        .windows
        .iter()
        .map(|w| {
            let mut v = window_json(w, &steps);
            let span = w.step_begin..=w.step_end.min(steps.len() - 1);
            if let Some(c) = &cal {
                v["band_pct"] = json!(c.band("window", bands::window_decode_only(&steps[span.clone()])));
            }
            let out = cal
                .as_ref()
                .map(|_| outside[span].iter().flatten().flatten().cloned().collect());
            shapes_json(&mut v, out.as_ref());
            // The benchmark keeps the point's last timed step (its steady sample, dynamo_fpm.md
            // §1.11); the device times it as a step.
            if let Some(i) = retained
                .get(&w.point)
                .and_then(|s| steps.iter().position(|d| d.step == *s))
            {
                v["retained_step"] = json!(steps[i].step);
                v["retained_device_us"] = json!(us(t.steps[i].value));
                if let Some(c) = &cal {
                    v["retained_band_pct"] = json!(c.band("step", steps[i].decode_only));
                }
            }
            v
        })
        .collect();
    let total: f64 = t.steps.iter().map(|l| l.value).sum();
    Ok(json!({
        "format": PREDICT_FORMAT,
        "plan_hash": plan_hash,
        "scenario": plan.scenario.name,
        "profile": profile.stamp(),
        "run": run_json(opts),
        "model": {
            "desc_version": desc::DESC_VERSION,
            "host_work": "predicted from the profile (host_work_op_ns, host_work_token_ns)",
        },
        "steps": step_rows,
        "points": points,
        "totals": {"steps": steps.len(), "device_us": us(total), "notes": lowered.notes.len()},
    }))
}

/// The description of every step with each launching op's predicted device time (as if timed
/// alone with events): what `kvsim predict --describe` adds.
pub fn describe_json(plan: &Plan, profile: &Profile, opts: &RunOptions) -> Result<Value, String> {
    let (_, steps) = describe_plan(plan, profile, opts)?;
    let shape = RunShape {
        time_ops: true,
        sync_windows: opts.sync_windows,
        host_work: HostWork::Predicted,
    };
    let t = simulate(&steps, &profile.params, shape);
    let mut op_us: std::collections::BTreeMap<(usize, usize), f64> = std::collections::BTreeMap::new();
    for o in &t.ops {
        op_us.insert((o.step, o.op), us(o.device.value));
    }
    let rows: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(si, s)| {
            let ops: Vec<Value> = s
                .ops
                .iter()
                .enumerate()
                .map(|(oi, op)| {
                    let mut v = serde_json::to_value(op).expect("descriptions serialize");
                    if let Some(t) = op_us.get(&(si, oi)) {
                        v["predicted_us_alone"] = json!(t);
                    }
                    v
                })
                .collect();
            json!({"step": s.step, "ops": ops})
        })
        .collect();
    Ok(json!({"desc_version": desc::DESC_VERSION, "steps": rows}))
}
