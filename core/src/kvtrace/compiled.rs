//! A trace compiled once (fields checked, ids interned, tokens laid out in op
//! order) and then replayed any number of times, with observation lines or
//! through the model alone: what benchmarks time.

use serde_json::Value;

use super::compile::{compile_op, Op, OpData};
use super::config::parse_config;
use super::exec::Replayer;
use super::observed::{config_error_line, Observed};
use super::replay::{refused, split_trace, stopped, ReplayEnd};
use super::TraceError;
use crate::kv::{KvCacheManager, KvConfig};

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
        Ok(cfg) => CompiledTrace {
            config: Ok(cfg),
            ops: ops.iter().map(|op| compile_op(op, &mut data)).collect(),
            data,
        },
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
        let kv = KvCacheManager::new(cfg.clone()).expect("validated by parse_config");
        let mut r = Replayer::new(kv);
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
            Err(refused_line) => {
                line(refused_line);
                return (refused(), 0);
            }
        };
        let mut o = Observed::new(cfg.clone(), None, &self.data);
        line(o.line());
        for (i, &op) in self.ops.iter().enumerate() {
            let error = o.step(&self.data, i, op);
            line(o.line());
            if let Some(kind) = error {
                return (stopped(i, kind), i + 1);
            }
        }
        (ReplayEnd::Completed, self.ops.len())
    }
}
