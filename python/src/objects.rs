//! Scenarios, plans, run reports and findings as Python classes over kvsim's own types.

use pyo3::prelude::*;

use kvsim_sim::api::{self, BuiltinScenario, Finding as RustFinding, Outcome, Plan as RustPlan, RunReport as Report};

use crate::convert::{json_text, to_py};
use crate::errors::{failure_err, InputError};

/// A scenario: a model layout, pool, scheduler and benchmark settings (a scenario file).
#[pyclass(module = "kvsim", frozen)]
#[derive(Clone)]
pub struct Scenario {
    pub inner: BuiltinScenario,
}

#[pymethods]
impl Scenario {
    /// A built-in scenario by name (`kvsim.builtin_scenarios()` lists them).
    #[staticmethod]
    fn builtin(name: &str) -> PyResult<Scenario> {
        api::builtin(name).map(|inner| Scenario { inner }).ok_or_else(|| {
            let names: Vec<String> = api::builtin_scenarios().into_iter().map(|s| s.name).collect();
            InputError::new_err(format!("unknown scenario {name:?}; built-in: {}", names.join(", ")))
        })
    }

    /// A scenario file's contents (JSON text, or a dict), validated.
    #[staticmethod]
    fn from_json(data: &Bound<'_, PyAny>) -> PyResult<Scenario> {
        let text = json_text(data)?;
        api::load_scenario(&text)
            .map(|inner| Scenario { inner })
            .map_err(|e| InputError::new_err(e.to_string()))
    }

    /// The scenario file's JSON text (what `kvsim scenarios --show NAME` prints).
    fn to_json(&self) -> String {
        api::scenario_file_json(&self.inner)
    }

    /// The scenario file as a dict, to edit and give back to `Scenario.from_json`.
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &serde_json::to_value(&self.inner).expect("scenarios serialize"))
    }

    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    #[getter]
    fn description(&self) -> String {
        self.inner.description.clone()
    }

    /// The strategies the gate allows: a subset of `synthetic`, `native`, `chain`.
    #[getter]
    fn strategies(&self) -> Vec<&'static str> {
        let v = api::gate(&self.inner);
        let mut out = vec!["synthetic"];
        if v.native {
            out.push("native");
        }
        if v.chain {
            out.push("chain");
        }
        out
    }

    fn __repr__(&self) -> String {
        format!("Scenario({:?})", self.inner.name)
    }
}

/// A `kvsim-plan/1` plan: a scenario and the steps a planner took (spec/plan.md).
#[pyclass(module = "kvsim", frozen)]
#[derive(Clone)]
pub struct Plan {
    pub inner: RustPlan,
}

#[pymethods]
impl Plan {
    /// A plan's JSON text (or a dict), parsed and validated; `InputError` names the JSON path.
    #[staticmethod]
    fn from_json(data: &Bound<'_, PyAny>) -> PyResult<Plan> {
        let text = json_text(data)?;
        api::load_plan(&text)
            .map(|inner| Plan { inner })
            .map_err(|e| InputError::new_err(e.to_string()))
    }

    /// The plan as JSON text (what `kvsim replay` reads).
    fn to_json(&self) -> String {
        serde_json::to_string(&self.inner).expect("plans serialize")
    }

    /// The plan as a dict.
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        to_py(py, &serde_json::to_value(&self.inner).expect("plans serialize"))
    }

    /// The plan's digest (as run reports name it).
    #[getter]
    fn hash(&self) -> String {
        api::plan_hash(&self.inner)
    }

    #[getter]
    fn scenario_name(&self) -> String {
        self.inner.scenario.name.clone()
    }

    #[getter]
    fn num_steps(&self) -> usize {
        self.inner.steps.len()
    }

    #[getter]
    fn num_ops(&self) -> usize {
        api::op_count(&self.inner)
    }

    /// Where a recorded plan came from (`{"planner": "dynamo", ...}`), or None.
    #[getter]
    fn source(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let v = serde_json::to_value(&self.inner.source).expect("sources serialize");
        to_py(py, &v)
    }

    fn __repr__(&self) -> String {
        format!(
            "Plan({:?}, {} steps, {} ops)",
            self.inner.scenario.name,
            self.inner.steps.len(),
            api::op_count(&self.inner)
        )
    }
}

/// Where and what: a broken invariant or a plan/model mismatch.
#[pyclass(module = "kvsim", frozen, get_all)]
pub struct Finding {
    /// The invariant's ID (`PL-WINDOW`, …); None for a mismatch.
    invariant: Option<String>,
    step: u64,
    rank: u32,
    op_index: Option<usize>,
    /// The op, as a dict (None at a step's end).
    op: Py<PyAny>,
    detail: String,
    /// A state excerpt (free blocks, live requests, …), as a dict.
    state: Py<PyAny>,
}

impl Finding {
    fn new(py: Python<'_>, f: &RustFinding) -> PyResult<Finding> {
        Ok(Finding {
            invariant: f.invariant.clone(),
            step: f.step,
            rank: f.rank,
            op_index: f.op_index,
            op: to_py(py, &f.op)?,
            detail: f.detail.clone(),
            state: to_py(py, &f.state)?,
        })
    }
}

#[pymethods]
impl Finding {
    fn __repr__(&self) -> String {
        format!(
            "Finding({}, step={}, rank={}, op_index={:?}: {})",
            self.invariant.as_deref().unwrap_or("mismatch"),
            self.step,
            self.rank,
            self.op_index,
            self.detail
        )
    }
}

/// What a simulator run produced.
#[pyclass(module = "kvsim", frozen)]
pub struct RunReport {
    pub inner: Report,
}

#[pymethods]
impl RunReport {
    /// `passed`, `violation` or `mismatch`.
    #[getter]
    fn result(&self) -> &'static str {
        match self.inner.outcome {
            Outcome::Passed => "passed",
            Outcome::Violation(_) => "violation",
            Outcome::Mismatch(_) => "mismatch",
        }
    }

    #[getter]
    fn passed(&self) -> bool {
        self.inner.passed()
    }

    /// The finding of a run that did not pass, else None.
    #[getter]
    fn finding(&self, py: Python<'_>) -> PyResult<Option<Finding>> {
        self.inner.finding().map(|f| Finding::new(py, f)).transpose()
    }

    #[getter]
    fn steps(&self) -> u64 {
        self.inner.steps
    }

    #[getter]
    fn ops(&self) -> u64 {
        self.inner.ops
    }

    #[getter]
    fn plan_hash(&self) -> String {
        self.inner.plan_hash.clone()
    }

    #[getter]
    fn sim_time_ns(&self) -> u64 {
        self.inner.sim_time_ns
    }

    /// Rare events the run reached (coverage), by name.
    #[getter]
    fn events(&self) -> std::collections::BTreeMap<String, u64> {
        self.inner.events.clone()
    }

    /// The op trace as JSON lines (runs made with `trace=True`).
    fn trace_jsonl(&self) -> String {
        self.inner.trace_jsonl()
    }

    /// The result file `kvsim replay --out` writes, as JSON text.
    fn to_json(&self) -> String {
        serde_json::to_string(&self.inner.to_json()).expect("reports serialize")
    }

    /// Raise `InvariantViolation` / `PlanMismatch` unless the run passed.
    fn raise_for_finding(&self, py: Python<'_>) -> PyResult<()> {
        self.inner.expect_passed().map_err(|f| failure_err(py, &f))
    }

    fn __repr__(&self) -> String {
        format!(
            "RunReport({}, {} steps, {} ops)",
            self.result(),
            self.inner.steps,
            self.inner.ops
        )
    }
}
