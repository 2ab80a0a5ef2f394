//! Whole-trace replay with observation lines, as `kvsim trace` prints them.

use serde_json::Value;

use super::compile::{compile_op, OpData};
use super::config::parse_config;
use super::observed::{config_error_line, Observed};
use super::TraceError;

/// How a replay ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayEnd {
    /// Every op was replayed.
    Completed,
    /// Replay stopped at an error line: `ConfigError`, `InvalidOp` or a model exception.
    Stopped {
        /// The op's index (-1: the config).
        index: i64,
        /// The error kind.
        error: String,
    },
}

/// The observation lines of one replay (without trailing newlines) and how it ended.
#[derive(Clone, Debug)]
pub struct Replay {
    /// The observation lines.
    pub lines: Vec<String>,
    /// How it ended.
    pub end: ReplayEnd,
    /// Ops replayed.
    pub ops: usize,
    /// Lookups whose hybrid fixed point re-asked a group at a shorter length (coverage).
    pub fixed_point_reasks: u64,
}

/// Parse and replay a trace file's text.
pub fn replay(text: &str) -> Result<Replay, TraceError> {
    let v: Value = serde_json::from_str(text).map_err(|e| TraceError::Json(e.to_string()))?;
    replay_value(&v)
}

/// The parts of a kvtrace file: its config and its ops.
pub fn split_trace(v: &Value) -> Result<(&Value, &Vec<Value>), TraceError> {
    let top = v
        .as_object()
        .ok_or_else(|| TraceError::Shape("the top level must be an object".into()))?;
    match top.get("format") {
        Some(Value::String(f)) if f == "kvtrace/1" => {}
        Some(other) => return Err(TraceError::Shape(format!("format must be \"kvtrace/1\", got {other}"))),
        None => return Err(TraceError::Shape("missing \"format\": \"kvtrace/1\"".into())),
    }
    let config = top
        .get("config")
        .ok_or_else(|| TraceError::Shape("missing \"config\"".into()))?;
    let ops = top
        .get("ops")
        .and_then(Value::as_array)
        .ok_or_else(|| TraceError::Shape("\"ops\" must be a list".into()))?;
    Ok((config, ops))
}

/// Replay an already parsed trace, compiling each op just before it runs (a
/// replay that stops early compiles no more than it needs).
pub fn replay_value(v: &Value) -> Result<Replay, TraceError> {
    let (config, ops) = split_trace(v)?;
    let cfg = match parse_config(config) {
        Ok(cfg) => cfg,
        Err(e) => {
            return Ok(Replay {
                lines: vec![config_error_line(&e.0)],
                end: refused(),
                ops: 0,
                fixed_point_reasks: 0,
            })
        }
    };
    let mut data = OpData::default();
    let mut o = Observed::new(cfg, None, &data);
    let mut lines = Vec::with_capacity(ops.len() + 1);
    lines.push(o.line().to_string());
    for (i, op) in ops.iter().enumerate() {
        data.clear_ops();
        let op = compile_op(op, &mut data);
        let error = o.step(&data, i, op);
        lines.push(o.line().to_string());
        if let Some(kind) = error {
            return Ok(Replay {
                lines,
                end: stopped(i, kind),
                ops: i + 1,
                fixed_point_reasks: o.r.fixed_point_reasks,
            });
        }
    }
    Ok(Replay {
        lines,
        end: ReplayEnd::Completed,
        ops: ops.len(),
        fixed_point_reasks: o.r.fixed_point_reasks,
    })
}

/// How a replay refused at init (`ConfigError`) ends.
pub(super) fn refused() -> ReplayEnd {
    ReplayEnd::Stopped {
        index: -1,
        error: "ConfigError".into(),
    }
}

/// How a replay stopped by op `i` failing with `kind` ends.
pub(super) fn stopped(i: usize, kind: &str) -> ReplayEnd {
    ReplayEnd::Stopped {
        index: i as i64,
        error: kind.to_string(),
    }
}
