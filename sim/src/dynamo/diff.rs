//! `kvsim dynamo diff`: kvsim's port of the planner against the real 1.6.1
//! planner on one scenario. Both sides are reduced to the same facts — grid
//! points, the regime of each, the order they ran in, stage plans and their
//! outcomes, capacity fallbacks, and the op sequence — and each fact is
//! compared; the first divergence is shown with its context.

use kvsim_core::plan::{Plan, PlanOp};
use serde_json::Value;

/// One side's facts.
#[derive(Debug, Default)]
pub struct Facts {
    /// (batch, total_kv_read_tokens, regime) in execution order, measured points.
    pub points: Vec<(u64, u64, String)>,
    /// (batch, total_kv_read_tokens, reason) of skipped points.
    pub skipped: Vec<(u64, u64, String)>,
    /// (batch, depth, outcome) of every warm-up stage, in order.
    pub stages: Vec<(u64, u64, String)>,
    /// (batch, depth) of every capacity fallback.
    pub fallbacks: Vec<(u64, u64)>,
    /// The op sequence: one token per op (observations and host bookkeeping left out).
    pub ops: Vec<String>,
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

impl Facts {
    /// Facts of a planner artifact (kvsim's and 1.6.1's share these fields) and its plan.
    pub fn of(artifact: &Value, plan: &Plan) -> Facts {
        let row = |r: &Value, label: &str| {
            let p = &r["point"];
            (
                u(&p["batch_size"]),
                u(&p["total_kv_read_tokens"]),
                r[label].as_str().unwrap_or("").to_string(),
            )
        };
        let points = artifact["results"]
            .as_array()
            .map(|a| a.iter().map(|r| row(r, "kv_seed_regime")).collect())
            .unwrap_or_default();
        let skipped = artifact["skipped_points"]
            .as_array()
            .map(|a| a.iter().map(|r| row(r, "reason")).collect())
            .unwrap_or_default();
        let kv = &artifact["kvwarm"];
        let stages = kv["stages"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|s| {
                        let outcome = if s["failed"] == true {
                            if s["soft_timeout"] == true {
                                "failed (soft timeout)"
                            } else {
                                "failed"
                            }
                        } else {
                            "built"
                        };
                        (u(&s["batch"]), u(&s["depth"]), outcome.to_string())
                    })
                    .collect()
            })
            .unwrap_or_default();
        let fallbacks = kv["capacity_fallbacks"]
            .as_array()
            .map(|a| a.iter().map(|f| (u(&f["batch"]), u(&f["depth"]))).collect())
            .unwrap_or_default();
        Facts {
            points,
            skipped,
            stages,
            fallbacks,
            ops: op_tokens(plan),
        }
    }
}

/// The plan's ops as comparable tokens: request names and step numbers differ
/// between the two planners (1.6.1 starts with an empty step), so a token names
/// the op and its sizes only. Point injections are compared as the execution order.
fn op_tokens(plan: &Plan) -> Vec<String> {
    let mut out = Vec::new();
    for st in &plan.steps {
        for op in &st.ops {
            let t = match op {
                PlanOp::AddRequest { prompt, .. } => format!("add({})", prompt.len()),
                PlanOp::Schedule { num_new_tokens, .. } => format!("schedule({num_new_tokens})"),
                PlanOp::Forward { batch } => {
                    format!(
                        "forward({}x, {} tokens)",
                        batch.len(),
                        batch.iter().map(|b| b.tokens).sum::<u64>()
                    )
                }
                PlanOp::FakeCompute { tokens, .. } => format!("fake_compute({tokens})"),
                PlanOp::RegisterShadow { ctx, .. } => format!("register_shadow(ctx {ctx})"),
                PlanOp::Finish { .. } => "finish".into(),
                PlanOp::Shed { .. } => "shed".into(),
                PlanOp::Preempt { .. } => "preempt".into(),
                PlanOp::ResetPrefixCache { .. } => "reset_prefix_cache".into(),
                PlanOp::EndSweep => "end_sweep".into(),
                PlanOp::PlannerFailed { kind, .. } => format!("planner_failed({kind:?})"),
                // Bookkeeping and observations differ in placement, not in what the planner decided.
                _ => continue,
            };
            out.push(t);
        }
    }
    out
}

/// One compared fact.
#[derive(Debug)]
pub struct Section {
    /// What is counted.
    pub name: &'static str,
    /// kvsim's count.
    pub kvsim: usize,
    /// Dynamo's count.
    pub dynamo: usize,
    /// `None` when both sides agree; else the first divergence with context.
    pub divergence: Option<String>,
}

fn first_divergence<T: PartialEq + std::fmt::Debug>(a: &[T], b: &[T], unquote: bool) -> Option<String> {
    let show = |v: &T| {
        let s = format!("{v:?}");
        if unquote {
            s.trim_matches('"').to_string()
        } else {
            s
        }
    };
    let i = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))?;
    let ctx = |v: &[T]| {
        let lo = i.saturating_sub(2);
        let hi = (i + 3).min(v.len());
        v[lo..hi].iter().map(&show).collect::<Vec<_>>().join(" | ")
    };
    Some(format!(
        "at #{i}: kvsim {} vs dynamo {}\n      kvsim : {}\n      dynamo: {}",
        a.get(i).map_or("(none)".into(), &show),
        b.get(i).map_or("(none)".into(), &show),
        ctx(a),
        ctx(b)
    ))
}

/// Compare kvsim's facts with the real planner's.
pub fn compare(kvsim: &Facts, dynamo: &Facts) -> Vec<Section> {
    let grid = |v: &[(u64, u64, String)]| {
        let mut g: Vec<(u64, u64)> = v.iter().map(|p| (p.0, p.1)).collect();
        g.sort_unstable();
        g
    };
    let (kg, dg) = (grid(&kvsim.points), grid(&dynamo.points));
    let regimes = |v: &[(u64, u64, String)]| {
        let mut r: Vec<(u64, u64, String)> = v.to_vec();
        r.sort();
        r
    };
    let order = |v: &[(u64, u64, String)]| v.iter().map(|p| (p.0, p.1)).collect::<Vec<_>>();
    let section = |name, kvsim: usize, dynamo: usize, divergence| Section {
        name,
        kvsim,
        dynamo,
        divergence,
    };
    // Points both measured, with their regimes (a grid difference is its own section).
    let kshared: Vec<(u64, u64, String)> = regimes(&kvsim.points)
        .into_iter()
        .filter(|p| dg.contains(&(p.0, p.1)))
        .collect();
    let dshared: Vec<(u64, u64, String)> = regimes(&dynamo.points)
        .into_iter()
        .filter(|p| kg.contains(&(p.0, p.1)))
        .collect();
    vec![
        section("grid points", kg.len(), dg.len(), first_divergence(&kg, &dg, false)),
        section(
            "regime per point",
            kshared.len(),
            dshared.len(),
            first_divergence(&kshared, &dshared, false),
        ),
        section(
            "execution order",
            kvsim.points.len(),
            dynamo.points.len(),
            first_divergence(&order(&kvsim.points), &order(&dynamo.points), false),
        ),
        section(
            "skipped points",
            kvsim.skipped.len(),
            dynamo.skipped.len(),
            first_divergence(&kvsim.skipped, &dynamo.skipped, false),
        ),
        section(
            "stage plans and outcomes",
            kvsim.stages.len(),
            dynamo.stages.len(),
            first_divergence(&kvsim.stages, &dynamo.stages, false),
        ),
        section(
            "capacity fallbacks",
            kvsim.fallbacks.len(),
            dynamo.fallbacks.len(),
            first_divergence(&kvsim.fallbacks, &dynamo.fallbacks, false),
        ),
        section(
            "op sequence",
            kvsim.ops.len(),
            dynamo.ops.len(),
            first_divergence(&kvsim.ops, &dynamo.ops, true),
        ),
    ]
}
