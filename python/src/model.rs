//! The KV-cache model step by step: kvtrace/1 ops (spec/kvtrace-format.md) applied one at a
//! time to vLLM 0.33's `KVCacheManager` as kvsim models it, each answered with the observation
//! line real vLLM prints, and the model's invariants checkable between ops.

use pyo3::prelude::*;

use kvsim_core::invariants::model::check_model;
use kvsim_core::kvtrace::Session;

use crate::convert::{json_value, to_py};
use crate::errors::{InputError, KvModelError};

/// One rank's KV-cache manager, driven op by op.
#[pyclass(module = "kvsim", unsendable)]
pub struct KvModel {
    session: Session,
    next: usize,
}

/// A broken model invariant (`id`, e.g. `KV-REF`, and `detail`), as `check_invariants` lists them.
#[pyclass(module = "kvsim", frozen, get_all)]
pub struct Violation {
    id: String,
    detail: String,
}

#[pymethods]
impl Violation {
    fn __repr__(&self) -> String {
        format!("Violation({}: {})", self.id, self.detail)
    }
}

fn observation(py: Python<'_>, line: &str) -> PyResult<Py<PyAny>> {
    let v: serde_json::Value = serde_json::from_str(line).expect("observation lines are JSON");
    to_py(py, &v)
}

#[pymethods]
impl KvModel {
    /// A model of a kvtrace `config` (a dict or JSON text: `num_blocks`, `enable_caching`,
    /// `max_model_len`, `block_size`, `groups`); a refused config raises `InputError`.
    #[new]
    fn new(config: &Bound<'_, PyAny>) -> PyResult<KvModel> {
        let config = json_value(config)?;
        let session = Session::new(&config).map_err(InputError::new_err)?;
        Ok(KvModel { session, next: 0 })
    }

    /// The init line (coordinator, block sizes, the empty pool), as a dict.
    fn init(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        observation(py, &self.session.init_line())
    }

    /// Apply one op (`{"op": "add_request", ...}`); returns its observation line as a dict.
    /// An op that fails raises `KvModelError` with the line as `observation`; as in vLLM's
    /// replay, the model should not be used after a model exception.
    fn apply(&mut self, py: Python<'_>, op: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let op = json_value(op)?;
        let step = self.session.apply(self.next, &op);
        self.next += 1;
        let line = observation(py, &step.line)?;
        if let Some(kind) = step.error {
            let err = KvModelError::new_err(format!("{kind}: {}", step.line));
            err.value(py).setattr("observation", line)?;
            err.value(py).setattr("error", kind)?;
            return Err(err);
        }
        Ok(line)
    }

    /// The model invariants (KV-*) checked now: an empty list when they all hold.
    fn check_invariants(&self) -> Vec<Violation> {
        check_model(self.session.kv(), &[])
            .into_iter()
            .map(|v| Violation {
                id: v.id.as_str().to_string(),
                detail: v.detail,
            })
            .collect()
    }

    /// Blocks in the free queue (cached blocks with no holder included).
    #[getter]
    fn free_blocks(&self) -> usize {
        self.session.kv().pool.num_free_blocks()
    }

    /// Every live request's block table per group, by request id.
    fn block_tables(&self) -> std::collections::BTreeMap<String, Vec<Vec<u32>>> {
        let kv = self.session.kv();
        self.session
            .live()
            .map(|(id, r)| (id.to_string(), kv.get_block_ids(r.id)))
            .collect()
    }
}
