//! JSON values to Python objects and back: kvsim's data crosses as plain dicts and lists.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;

use crate::errors::InputError;

/// A JSON value as the Python object `json.loads` would give.
pub fn to_py(py: Python<'_>, v: &Value) -> PyResult<Py<PyAny>> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any().unbind(),
            (None, Some(i)) => i.into_pyobject(py)?.into_any().unbind(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any().unbind(),
        },
        Value::String(s) => s.into_pyobject(py)?.into_any().unbind(),
        Value::Array(a) => {
            let items = a.iter().map(|x| to_py(py, x)).collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any().unbind()
        }
        Value::Object(o) => {
            let d = PyDict::new(py);
            for (k, x) in o {
                d.set_item(k, to_py(py, x)?)?;
            }
            d.into_any().unbind()
        }
    })
}

/// JSON text from a `str` (taken as JSON text) or any other object (`json.dumps` of it).
pub fn json_text(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(s) = obj.extract::<String>() {
        return Ok(s);
    }
    let json = obj.py().import("json")?;
    json.call_method1("dumps", (obj,))
        .and_then(|s| s.extract::<String>())
        .map_err(|e| InputError::new_err(format!("not JSON data: {e}")))
}

/// A JSON value from a `str` (JSON text) or any JSON-able object.
pub fn json_value(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    serde_json::from_str(&json_text(obj)?).map_err(|e| InputError::new_err(format!("not valid JSON: {e}")))
}
