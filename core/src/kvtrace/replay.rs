//! Whole-trace replay: a trace is compiled once (fields checked, ids interned)
//! and then replayed, with observation lines or through the model alone.

use serde_json::Value;

use super::compile::{compile_op, Op, OpData};
use super::config::parse_config;
use super::observe::Observer;
use super::session::{config_error_line, init_line, observed_step, replayer};
use super::TraceError;
use crate::kv::KvConfig;

/// How a replay ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayEnd {
    /// Every op was replayed.
    Completed,
    /// Replay stopped at an error line: `ConfigError`, `InvalidOp` or a model exception.
    Stopped { index: i64, error: String },
}

/// The observation lines of one replay (without trailing newlines) and how it ended.
#[derive(Clone, Debug)]
pub struct Replay {
    pub lines: Vec<String>,
    pub end: ReplayEnd,
    pub ops: usize,
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

/// Replay an already parsed trace.
pub fn replay_value(v: &Value) -> Result<Replay, TraceError> {
    let trace = compile(v)?;
    let mut lines = Vec::with_capacity(trace.num_ops() + 1);
    let (end, ops) = trace.run(|line| lines.push(line.to_string()));
    Ok(Replay { lines, end, ops })
}

/// A trace ready to replay, any number of times.
pub struct CompiledTrace {
    /// The validated config, or the `ConfigError` line that refuses it.
    config: Result<KvConfig, String>,
    data: OpData,
    ops: Vec<Op>,
}

/// Check a parsed trace's shape and config and compile its ops.
pub fn compile(v: &Value) -> Result<CompiledTrace, TraceError> {
    let (config, ops) = split_trace(v)?;
    let mut data = OpData::default();
    Ok(match parse_config(config) {
        Err(e) => CompiledTrace {
            config: Err(config_error_line(&e.0)),
            data,
            ops: Vec::new(),
        },
        Ok(cfg) => {
            let ops = ops.iter().map(|op| compile_op(op, &mut data)).collect();
            data.ids.rank_all();
            CompiledTrace {
                config: Ok(cfg),
                data,
                ops,
            }
        }
    })
}

impl CompiledTrace {
    /// Ops in the trace (none when the config is refused).
    pub fn num_ops(&self) -> usize {
        self.ops.len()
    }

    /// Replay through the model without observation lines; returns the number
    /// of ops applied, the failing one included.
    pub fn run_quiet(&self) -> usize {
        let Ok(cfg) = &self.config else { return 0 };
        let mut r = replayer(cfg.clone(), None);
        for (i, &op) in self.ops.iter().enumerate() {
            if r.apply(&self.data, op).is_err() {
                return i + 1;
            }
        }
        self.ops.len()
    }

    /// Replay, handing each observation line (no newline) to `line`; returns
    /// how the replay ended and the number of ops applied.
    pub fn run(&self, mut line: impl FnMut(&str)) -> (ReplayEnd, usize) {
        let cfg = match &self.config {
            Ok(cfg) => cfg,
            Err(refused) => {
                line(refused);
                let end = ReplayEnd::Stopped {
                    index: -1,
                    error: "ConfigError".into(),
                };
                return (end, 0);
            }
        };
        let mut r = replayer(cfg.clone(), None);
        let mut obs = Observer::default();
        let mut buf = String::with_capacity(1024);
        init_line(&r, &self.data, &mut obs, &mut buf);
        line(&buf);
        r.take_changes();
        for (i, &op) in self.ops.iter().enumerate() {
            buf.clear();
            let error = observed_step(&mut r, &self.data, &mut obs, i, op, &mut buf);
            line(&buf);
            if let Some(kind) = error {
                let end = ReplayEnd::Stopped {
                    index: i as i64,
                    error: kind.to_string(),
                };
                return (end, i + 1);
            }
        }
        (ReplayEnd::Completed, self.ops.len())
    }
}
