//! Typed reading of one op's fields; a malformed field is an `InvalidOp`.
//! An explicit `null` for an optional field means its default (as vLLM's replayer reads it).

use serde_json::{Map, Value};

pub type Fields<'a> = &'a Map<String, Value>;

pub fn int(f: Fields, key: &str, default: Option<u64>) -> Result<u64, String> {
    match f.get(key).filter(|v| !v.is_null()) {
        None => default.ok_or_else(|| format!("{key} is required")),
        Some(v) if !v.is_boolean() => v
            .as_u64()
            .ok_or_else(|| format!("{key} must be a non-negative integer, got {v}")),
        Some(v) => Err(format!("{key} must be an integer, got {v}")),
    }
}

pub fn flag(f: Fields, key: &str, default: bool) -> Result<bool, String> {
    match f.get(key).filter(|v| !v.is_null()) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| format!("{key} must be a bool, got {v}")),
    }
}

pub fn id<'a>(f: Fields<'a>) -> Result<&'a str, String> {
    match f.get("id").and_then(Value::as_str) {
        Some(s) if !s.is_empty() => Ok(s),
        _ => Err("id must be a non-empty string".into()),
    }
}

pub fn tokens(f: Fields, key: &str, required: bool) -> Result<Vec<u64>, String> {
    match f.get(key).filter(|v| !v.is_null()) {
        None if !required => Ok(Vec::new()),
        None => Err(format!("{key} is required")),
        Some(Value::Array(a)) => a
            .iter()
            .map(|t| {
                t.as_u64()
                    .ok_or_else(|| format!("{key} must hold integers >= 0, got {t}"))
            })
            .collect(),
        Some(v) => Err(format!("{key} must be a list of integers, got {v}")),
    }
}
