//! The exceptions `import kvsim` raises. A finding (a broken invariant, a plan/model
//! mismatch) carries the same fields as kvsim's `Finding`: `invariant`, `step`, `rank`,
//! `op_index`, `op`, `detail`, `state`.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use kvsim_sim::api::{Finding, RunFailure};

use crate::convert::to_py;

create_exception!(kvsim, KvsimError, PyException, "Every error kvsim raises.");
create_exception!(
    kvsim,
    InputError,
    KvsimError,
    "Bad input: a malformed or inconsistent plan, scenario or trace (exit 2 at the CLI)."
);
create_exception!(
    kvsim,
    PlannerError,
    KvsimError,
    "A planner could not plan the scenario (the strategy does not apply, or it refused its plan)."
);
create_exception!(
    kvsim,
    InvariantViolation,
    KvsimError,
    "A plan broke an invariant: `invariant`, `step`, `rank`, `op_index`, `op`, `detail`, `state`."
);
create_exception!(
    kvsim,
    PlanMismatch,
    KvsimError,
    "A plan disagrees with the model (it cannot come from its scenario); fields as InvariantViolation."
);
create_exception!(
    kvsim,
    KvModelError,
    KvsimError,
    "A KV-model op failed (InvalidOp or a model exception): `observation` is its line."
);

/// The exception for a run that did not pass, its attributes set from the finding.
pub fn failure_err(py: Python<'_>, failure: &RunFailure) -> PyErr {
    let f = failure.finding();
    let err = match failure {
        RunFailure::Violation(_) => InvariantViolation::new_err(failure.to_string()),
        RunFailure::Mismatch(_) => PlanMismatch::new_err(failure.to_string()),
    };
    if let Err(e) = set_fields(py, err.value(py).as_any(), f) {
        return e;
    }
    err
}

/// `invariant`, `step`, `rank`, `op_index`, `op`, `detail`, `state` on `obj`.
pub fn set_fields(py: Python<'_>, obj: &Bound<'_, PyAny>, f: &Finding) -> PyResult<()> {
    obj.setattr("invariant", f.invariant.clone())?;
    obj.setattr("step", f.step)?;
    obj.setattr("rank", f.rank)?;
    obj.setattr("op_index", f.op_index)?;
    obj.setattr("op", to_py(py, &f.op)?)?;
    obj.setattr("detail", f.detail.clone())?;
    obj.setattr("state", to_py(py, &f.state)?)?;
    Ok(())
}

/// Register the exception classes on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("KvsimError", py.get_type::<KvsimError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("PlannerError", py.get_type::<PlannerError>())?;
    m.add("InvariantViolation", py.get_type::<InvariantViolation>())?;
    m.add("PlanMismatch", py.get_type::<PlanMismatch>())?;
    m.add("KvModelError", py.get_type::<KvModelError>())?;
    Ok(())
}
