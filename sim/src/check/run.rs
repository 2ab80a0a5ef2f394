//! Run one swarm case: plan it (twice: once fault-free to place the faults on
//! the plan's own length, once with them), then execute the plan with every
//! invariant on.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kvsim_core::bugs::Mutant;
use kvsim_core::fpm::planner;
use kvsim_core::fpm::scenarios::BuiltinScenario;
use kvsim_core::fpm::sweep::SweepOptions;
use kvsim_core::plan::{forward_tokens, nominal_step_ns, FaultSpec, Plan, PlanOp};

use super::case::{build_faults, build_scenario, CaseSpec};
use crate::exec::{run_plan_opts, Outcome, RunOptions};

/// What one case showed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "result", rename_all = "snake_case", deny_unknown_fields)]
pub enum Verdict {
    /// The draw gives no valid scenario, or the strategy does not apply to it.
    NotApplicable {
        /// Why.
        reason: String,
    },
    /// Every invariant held.
    Passed,
    /// An invariant broke.
    Violation {
        /// Its ID.
        invariant: String,
        /// What broke.
        detail: String,
    },
    /// The plan disagrees with the model (a planner bug as well).
    Mismatch {
        /// What differs.
        detail: String,
    },
    /// The planner refused to plan (its own engine rejected its plan).
    PlannerError {
        /// What the planner said.
        detail: String,
    },
}

impl Verdict {
    /// A failure of the planner under test (not a skipped draw).
    pub fn failed(&self) -> bool {
        !matches!(self, Verdict::NotApplicable { .. } | Verdict::Passed)
    }
    /// A not-applicable case's reason without its numbers and scenario name, so that
    /// the reasons of a run can be counted (`""` for other verdicts).
    pub fn na_reason(&self) -> String {
        let Verdict::NotApplicable { reason } = self else {
            return String::new();
        };
        // The planner names the case's scenario ("<base>~"); the reason is the rest.
        let general: String = reason
            .split(' ')
            .map(|w| if w.ends_with("~:") { "<scenario>:" } else { w })
            .collect::<Vec<_>>()
            .join(" ");
        let mut out = String::with_capacity(general.len());
        for ch in general.chars() {
            if ch.is_ascii_digit() {
                if !out.ends_with('N') {
                    out.push('N');
                }
            } else {
                out.push(ch);
            }
        }
        out
    }
    /// The invariant ID, or the failure kind.
    pub fn label(&self) -> &str {
        match self {
            Verdict::NotApplicable { .. } => "n/a",
            Verdict::Passed => "passed",
            Verdict::Violation { invariant, .. } => invariant,
            Verdict::Mismatch { .. } => "MISMATCH",
            Verdict::PlannerError { .. } => "PLANNER-ERROR",
        }
    }
}

/// What one case showed: its verdict, ops run, coverage events and (failing) plan.
#[derive(Clone, Debug)]
pub struct CaseOutcome {
    /// The verdict.
    pub verdict: Verdict,
    /// Ops run.
    pub ops: u64,
    /// Coverage events reached.
    pub events: BTreeMap<String, u64>,
    /// The plan that failed (kept for shrinking).
    pub plan: Option<Plan>,
}

impl CaseOutcome {
    fn unrun(verdict: Verdict) -> Self {
        CaseOutcome {
            verdict,
            ops: 0,
            events: BTreeMap::new(),
            plan: None,
        }
    }
}

/// Steps and nominal duration of a plan (the executor's clock).
pub fn extent(plan: &Plan) -> (u64, u64) {
    let mut per_step: BTreeMap<u64, u64> = BTreeMap::new();
    for st in &plan.steps {
        *per_step.entry(st.step).or_default() += forward_tokens(&st.ops);
    }
    let steps = per_step.keys().next_back().map_or(0, |s| s + 1);
    (steps, per_step.values().map(|&t| nominal_step_ns(t)).sum())
}

/// Plan case `c` on `base` (with its faults), or the verdict that ends it before a run.
pub fn case_plan(base: &BuiltinScenario, c: &CaseSpec, mutant: Option<Mutant>) -> Result<Plan, Verdict> {
    let s = match build_scenario(base, c) {
        Ok(s) => s,
        Err(e) => {
            return Err(Verdict::NotApplicable {
                reason: format!("scenario: {e}"),
            })
        }
    };
    let planner = c.strategy.map(planner::for_strategy);
    let opts = SweepOptions {
        mutant,
        ..SweepOptions::default()
    };
    let plan0 = match planner::plan(planner, &s, &opts) {
        Ok(p) => p,
        Err(e) if e.0.contains("does not apply") => return Err(Verdict::NotApplicable { reason: e.0 }),
        Err(e) => return Err(Verdict::PlannerError { detail: e.0 }),
    };
    let chain = plan0.meta.initialization_strategy.as_deref() == Some("shared_prefix_chain");
    let (steps, duration) = extent(&plan0.plan);
    let (mut faults, timeout) = build_faults(c, s.scenario.dp_ranks, steps, duration);
    // Steps that register shadows: where a pool shrinking mid-run meets a planner
    // that can react (the registration pre-check, §3.5 step 2).
    let registrations: Vec<u64> = plan0
        .plan
        .steps
        .iter()
        .filter(|st| st.ops.iter().any(|o| matches!(o, PlanOp::RegisterShadow { .. })))
        .map(|st| st.step)
        .collect();
    // Steps whose forward returns a sampled token (a chain's last chunk, a decode):
    // where delayed outputs leave placeholders in flight.
    let outputs: Vec<u64> = plan0
        .plan
        .steps
        .iter()
        .filter(|st| {
            st.ops
                .iter()
                .any(|o| matches!(o, PlanOp::Forward { batch } if batch.iter().any(|b| !b.output.is_empty())))
        })
        .map(|st| st.step)
        .collect();
    let pick = |list: &[u64], step: u64| -> u64 {
        if list.is_empty() {
            step
        } else {
            list[(step * list.len() as u64 / steps.max(1)) as usize % list.len()]
        }
    };
    for f in &mut faults {
        match f {
            FaultSpec::StageFailure { step, .. } => *step = pick(&registrations, *step),
            FaultSpec::DelayOutputs { step, .. } => *step = pick(&outputs, *step),
            _ => {}
        }
        if let FaultSpec::ShrinkPool { step, blocks, .. } = f {
            *blocks = (s.scenario.pool_blocks * c.shrink_pool.map_or(0, |x| x.1) / 100).max(1);
            // DECISION: a pool shrinks mid-run only at the start of a shadow
            // registration step (chains); otherwise it is a smaller profiled pool
            // (step 0), which every planner negotiates. A pool shrinking under a
            // point being measured is not a planner bug.
            *step = match (*step, registrations.is_empty()) {
                (0, _) | (_, true) => 0,
                (pct_step, false) => {
                    registrations[(pct_step * registrations.len() as u64 / steps.max(1)) as usize % registrations.len()]
                }
            };
        }
    }
    if !chain {
        // Delays and registration failures act on chains and shadows only.
        faults.retain(|f| !matches!(f, FaultSpec::DelayOutputs { .. } | FaultSpec::StageFailure { .. }));
    }
    if faults.is_empty() && timeout.is_none() {
        return Ok(plan0.plan);
    }
    let opts = SweepOptions {
        timeout_seconds: timeout,
        faults,
        mutant,
    };
    planner::plan(planner, &s, &opts)
        .map(|p| p.plan)
        .map_err(|e| Verdict::PlannerError { detail: e.0 })
}

/// Plan and run case `c` on `base`.
pub fn run_case(base: &BuiltinScenario, c: &CaseSpec, mutant: Option<Mutant>) -> CaseOutcome {
    let plan = match case_plan(base, c, mutant) {
        Ok(p) => p,
        Err(verdict) => return CaseOutcome::unrun(verdict),
    };
    let report = run_plan_opts(&plan, RunOptions::quiet(mutant), &mut |_, _| {});
    let verdict = match &report.outcome {
        Outcome::Passed => Verdict::Passed,
        Outcome::Violation(f) => Verdict::Violation {
            invariant: f.invariant.clone().unwrap_or_default(),
            detail: f.detail.clone(),
        },
        Outcome::Mismatch(f) => Verdict::Mismatch {
            detail: format!("step {} rank {}: {}", f.step, f.rank, f.detail),
        },
    };
    let failed = verdict.failed();
    CaseOutcome {
        verdict,
        ops: report.ops,
        events: report.events,
        plan: failed.then_some(plan),
    }
}
