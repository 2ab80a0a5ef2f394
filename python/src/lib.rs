//! `import kvsim`: kvsim's library API for Python. Scenarios and plans, `run` and `check`
//! (the same outcome, `check` raising on a finding), the swarm, the KV model step by step, and
//! findings as exceptions carrying kvsim's `Finding` fields. python/kvsim/__init__.py is the
//! package around this extension.

mod convert;
mod errors;
mod model;
mod objects;

use pyo3::prelude::*;

use kvsim_core::bugs::Mutant;
use kvsim_sim::api::{self, RunOptions, Strategy, SweepOptions};
use kvsim_sim::check::suite::{check as swarm_check, CheckConfig};

use convert::to_py;
use errors::{failure_err, InputError, PlannerError};
use objects::{Finding, Plan, RunReport, Scenario};

/// The names of the built-in scenarios.
#[pyfunction]
fn builtin_scenarios() -> Vec<String> {
    api::builtin_scenarios().into_iter().map(|s| s.name).collect()
}

/// The names of the mutants (`kvsim mutants`): seed bugs, model bugs and slips.
#[pyfunction]
fn mutants() -> Vec<String> {
    Mutant::all().into_iter().map(|m| m.to_string()).collect()
}

fn strategy(name: Option<&str>) -> PyResult<Option<Strategy>> {
    match name {
        None | Some("auto") => Ok(None),
        Some("synthetic") => Ok(Some(Strategy::Synthetic)),
        Some("native") => Ok(Some(Strategy::Native)),
        Some("chain") => Ok(Some(Strategy::Chain)),
        Some(other) => Err(InputError::new_err(format!(
            "unknown strategy {other:?}; use auto, synthetic, native or chain"
        ))),
    }
}

fn mutant(name: Option<&str>) -> PyResult<Option<Mutant>> {
    name.map(|n| n.parse::<Mutant>().map_err(InputError::new_err))
        .transpose()
}

/// Plan a whole benchmark sweep of `scenario` with kvsim's planner for `strategy` (`auto`:
/// the gate's choice), optionally under a soft timeout in simulated seconds.
#[pyfunction]
#[pyo3(signature = (scenario, strategy=None, timeout_seconds=None))]
fn plan(scenario: &Scenario, strategy: Option<&str>, timeout_seconds: Option<f64>) -> PyResult<Plan> {
    let opts = SweepOptions {
        timeout_seconds,
        ..SweepOptions::default()
    };
    api::plan_with(&scenario.inner, self::strategy(strategy)?, &opts)
        .map(|p| Plan { inner: p.plan })
        .map_err(|e| PlannerError::new_err(e.0))
}

fn run_report(py: Python<'_>, plan: &Plan, mutant: Option<&str>, paranoid: bool, trace: bool) -> PyResult<RunReport> {
    let opts = RunOptions {
        mutant: self::mutant(mutant)?,
        trace,
        paranoid,
        hash: true,
    };
    let plan = plan.inner.clone();
    let inner = py.detach(move || api::run_with(&plan, opts));
    Ok(RunReport { inner })
}

/// Run `plan` on the simulator with every invariant checked; the report says how it ended.
/// `mutant` switches a deliberate bug on in the engine; `paranoid` scans the whole model after
/// every op; `trace` keeps the op trace.
#[pyfunction]
#[pyo3(signature = (plan, mutant=None, paranoid=false, trace=false))]
fn run(py: Python<'_>, plan: &Plan, mutant: Option<&str>, paranoid: bool, trace: bool) -> PyResult<RunReport> {
    run_report(py, plan, mutant, paranoid, trace)
}

/// `run`, raising `InvariantViolation` (or `PlanMismatch`) unless the plan passed; returns the
/// same report when it did.
#[pyfunction]
#[pyo3(signature = (plan, mutant=None, paranoid=false, trace=false))]
fn check(py: Python<'_>, plan: &Plan, mutant: Option<&str>, paranoid: bool, trace: bool) -> PyResult<RunReport> {
    let report = run_report(py, plan, mutant, paranoid, trace)?;
    report.inner.expect_passed().map_err(|f| failure_err(py, &f))?;
    Ok(report)
}

/// `kvsim check` over `scenarios` (Scenario objects; default every built-in): `cases` swarm
/// cases each, seeded by `seed`, on `jobs` threads. Returns the `kvsim check --json` report
/// as a dict (its `failures` list is empty when every case passed).
#[pyfunction]
#[pyo3(signature = (scenarios=None, cases=20, seed=0, jobs=1))]
fn swarm(
    py: Python<'_>,
    scenarios: Option<Vec<PyRef<'_, Scenario>>>,
    cases: u64,
    seed: u64,
    jobs: usize,
) -> PyResult<Py<PyAny>> {
    if cases == 0 || jobs == 0 {
        return Err(InputError::new_err("cases and jobs must be at least 1"));
    }
    let scenarios = match scenarios {
        Some(list) => list.iter().map(|s| s.inner.clone()).collect(),
        None => api::builtin_scenarios(),
    };
    let cfg = CheckConfig {
        seed,
        cases,
        shard: (1, 1),
        scenarios,
        only: None,
        jobs,
    };
    let report = py.detach(move || swarm_check(&cfg, &mut |_, _| {}));
    to_py(py, &serde_json::to_value(&report).expect("reports serialize"))
}

#[pymodule]
fn _kvsim(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<Scenario>()?;
    m.add_class::<Plan>()?;
    m.add_class::<RunReport>()?;
    m.add_class::<Finding>()?;
    m.add_class::<model::KvModel>()?;
    m.add_class::<model::Violation>()?;
    m.add_function(wrap_pyfunction!(builtin_scenarios, m)?)?;
    m.add_function(wrap_pyfunction!(mutants, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(swarm, m)?)?;
    Ok(())
}
