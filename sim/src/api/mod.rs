//! kvsim as a library: **describe a scenario → plan it with a planner → run the plan →
//! assert the invariants held or inspect the outcome**. Everything a downstream test suite
//! needs is re-exported here, so `kvsim-sim` is its one dependency (with the `proptest`
//! feature for `kvsim_sim::strategies`).
//!
//! ```
//! use kvsim_sim::api::{self, ScenarioBuilder, Strategy};
//!
//! // Describe: a small MoE with full attention and a sliding window (or
//! // `api::builtin("gpt-oss-tp")`, or `api::load_scenario(&text)` for a scenario file).
//! let scenario = ScenarioBuilder::new("my-moe")
//!     .full_attention(16, 4, 2, 64)
//!     .sliding_window(32, 16, 4, 2, 64)
//!     .experts(8, 2)
//!     .pool_blocks(400)
//!     .scheduler(4, 256, 256)
//!     .build()?;
//!
//! // Plan it with kvsim's port of the native warm-up planner, run it with every invariant.
//! let planned = api::plan(&scenario, Some(Strategy::Native))?;
//! let report = api::run(&planned.plan);
//! report.expect_passed()?;
//! assert!(report.ops > 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A plan from anywhere else (your own planner, a recording of Dynamo's) runs the same way:
//! [`load_plan`] then [`run`]. A broken invariant is an [`Outcome::Violation`] whose
//! [`Finding`] names the invariant, step, rank and op; [`RunReport::expect_passed`] turns it
//! into an error. Swarm cases ([`CaseSpec`]) and their shrinking are [`check_case`].

mod build;
mod case;
mod scenario;

pub use build::{prefill_ops, tiny_scenario, token_ids, PlanBuilder};
pub use case::{check_case, draw_case, CaseFailure};
pub use scenario::ScenarioBuilder;

pub use kvsim_core::bugs::Mutant;
pub use kvsim_core::fpm::gate::{gate, GateVerdict, Strategy};
pub use kvsim_core::fpm::scenario_file::{load_scenario_file as load_scenario, scenario_file_json, ScenarioFileError};
pub use kvsim_core::fpm::scenarios::{builtin_scenarios, validate_scenario, BenchSettings, BuiltinScenario};
pub use kvsim_core::fpm::sweep::{SweepError, SweepOptions, SweepPlan};
pub use kvsim_core::invariants::catalog::CATALOG;
pub use kvsim_core::invariants::InvariantId;
pub use kvsim_core::plan::{load_plan, FaultSpec, Plan, PlanError, PlanOp, Scenario};

pub use crate::check::case::CaseSpec;
pub use crate::check::run::{run_case, CaseOutcome, Verdict};
pub use crate::check::shrink::{op_count, shrink};
pub use crate::exec::{plan_hash, Finding, Outcome, RunOptions, RunReport};

use kvsim_core::fpm::planner;
use kvsim_core::fpm::scenarios::find_scenario;

/// A built-in scenario by name (`kvsim scenarios` lists them).
///
/// ```
/// let s = kvsim_sim::api::builtin("llama31-8b").unwrap();
/// assert_eq!(s.scenario.model.groups.len(), 1);
/// assert!(kvsim_sim::api::builtin("no-such-model").is_none());
/// ```
pub fn builtin(name: &str) -> Option<BuiltinScenario> {
    find_scenario(name)
}

/// Plans a whole benchmark sweep of `scenario` with kvsim's port of the planner for
/// `strategy`, or with the gate's choice when `None` (`kvsim sweep --strategy auto`).
/// `Err` when the strategy does not apply to the scenario or the planner refused its own plan.
pub fn plan(scenario: &BuiltinScenario, strategy: Option<Strategy>) -> Result<SweepPlan, SweepError> {
    plan_with(scenario, strategy, &SweepOptions::default())
}

/// [`plan`] with options: a soft timeout, faults the plan will carry, a seed-bug mutant.
pub fn plan_with(
    scenario: &BuiltinScenario,
    strategy: Option<Strategy>,
    opts: &SweepOptions,
) -> Result<SweepPlan, SweepError> {
    validate_scenario(scenario).map_err(|e| SweepError(format!("scenario {}: {e}", scenario.name)))?;
    planner::plan(strategy.map(planner::for_strategy), scenario, opts)
}

/// Runs a (validated) plan on the simulator with every invariant checked, no op trace kept.
/// The report's outcome says whether it passed; see [`RunReport::expect_passed`].
///
/// ```
/// use kvsim_sim::api::{self, Outcome};
///
/// let text = std::fs::read_to_string(concat!(
///     env!("CARGO_MANIFEST_DIR"),
///     "/../tests/data/plans/shadow_one_group.json"
/// ))?;
/// let report = api::run(&api::load_plan(&text)?);
/// let Outcome::Violation(finding) = &report.outcome else { panic!("expected a violation") };
/// assert_eq!(finding.invariant.as_deref(), Some("PL-SHADOW-ATOMIC"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run(plan: &Plan) -> RunReport {
    run_with(plan, RunOptions::quiet(None))
}

/// [`run`] with options: keep the op trace, a mutant in the engine, full model scans.
pub fn run_with(plan: &Plan, opts: RunOptions) -> RunReport {
    crate::exec::run_plan_opts(plan, opts, &mut |_, _| {})
}

/// Why a run did not pass: what [`RunReport::expect_passed`] returns.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RunFailure {
    /// An invariant broke (`finding.invariant` names it).
    #[error("{} at step {} rank {}{}: {}", .0.invariant.as_deref().unwrap_or("?"), .0.step, .0.rank, op_at(.0), .0.detail)]
    Violation(Box<Finding>),
    /// The plan disagrees with the model: it cannot have come from this scenario.
    #[error("plan/model mismatch at step {} rank {}{}: {}", .0.step, .0.rank, op_at(.0), .0.detail)]
    Mismatch(Box<Finding>),
}

fn op_at(f: &Finding) -> String {
    f.op_index.map(|i| format!(" op {i}")).unwrap_or_default()
}

impl RunFailure {
    /// Where and what.
    pub fn finding(&self) -> &Finding {
        match self {
            RunFailure::Violation(f) | RunFailure::Mismatch(f) => f,
        }
    }
}

impl RunReport {
    /// The finding of a run that did not pass.
    pub fn finding(&self) -> Option<&Finding> {
        match &self.outcome {
            Outcome::Passed => None,
            Outcome::Violation(f) | Outcome::Mismatch(f) => Some(f),
        }
    }

    /// `Ok` when every invariant held and the plan matched the model; else the finding as an
    /// error (for `?` in a test).
    pub fn expect_passed(&self) -> Result<(), RunFailure> {
        match &self.outcome {
            Outcome::Passed => Ok(()),
            Outcome::Violation(f) => Err(RunFailure::Violation(Box::new(f.clone()))),
            Outcome::Mismatch(f) => Err(RunFailure::Mismatch(Box::new(f.clone()))),
        }
    }
}

/// Plans `scenario` and runs the plan: `Ok(report)` when it passed. A planner refusal is
/// `Err(CheckError::Plan)`; a broken invariant or a mismatch `Err(CheckError::Run)`.
pub fn check_scenario(scenario: &BuiltinScenario, strategy: Option<Strategy>) -> Result<RunReport, CheckError> {
    let planned = plan(scenario, strategy)?;
    let report = run(&planned.plan);
    report.expect_passed()?;
    Ok(report)
}

/// Why [`check_scenario`] failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CheckError {
    /// The planner did not produce a plan.
    #[error("planning failed: {0}")]
    Plan(#[from] SweepError),
    /// The plan ran and did not pass.
    #[error("{0}")]
    Run(#[from] RunFailure),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bad_plan_fails_with_the_invariant_where_it_broke() {
        // A sliding-window block zeroed before the decode that reads it.
        let decode = vec![
            json!({"op": "schedule", "req": "a", "num_new_tokens": 1}),
            json!({"op": "zero_blocks", "group": 1, "blocks": [6]}),
            json!({"op": "forward", "batch": [{"req": "a", "tokens": 1, "output": [9]}]}),
        ];
        let plan = PlanBuilder::new(tiny_scenario(Some(4), 1, 32))
            .step(0, 0, prefill_ops("a", 12))
            .step(1, 0, decode)
            .build()
            .unwrap();
        let report = run(&plan);
        let err = report.expect_passed().unwrap_err();
        let f = err.finding();
        assert_eq!(f.invariant.as_deref(), Some("PL-WINDOW"));
        assert_eq!((f.step, f.rank, f.op_index), (1, 0, Some(2)));
        assert_eq!(Some(f), report.finding());
        assert!(
            err.to_string().starts_with("PL-WINDOW at step 1 rank 0 op 2: "),
            "{err}"
        );
    }

    #[test]
    fn a_described_scenario_plans_and_passes() {
        let s = ScenarioBuilder::new("t")
            .full_attention(16, 2, 2, 64)
            .sliding_window(32, 16, 2, 2, 64)
            .experts(8, 2)
            .pool_blocks(300)
            .scheduler(4, 256, 256)
            .build()
            .unwrap();
        let r = check_scenario(&s, None).unwrap();
        assert!(r.passed() && r.ops > 0);
        let back = load_scenario(&scenario_file_json(&s)).unwrap();
        assert_eq!(back, s);
        assert!(matches!(
            check_scenario(&s, Some(Strategy::Chain)),
            Err(CheckError::Plan(e)) if e.0.contains("does not apply")
        ));
    }
}
