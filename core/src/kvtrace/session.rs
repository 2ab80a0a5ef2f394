//! An open replay: raw ops are applied one at a time and the model is
//! inspectable between them (the generator drives it online; property tests
//! check invariants after every op).

use serde_json::Value;

use super::compile::{compile_op, OpData};
use super::config::parse_config;
use super::exec::OpError;
use super::observe::Observer;
use super::observed::{config_error_line, render_init, Observed};
use crate::kv::{KvCacheManager, ModelMutant, Request};

/// One replayed op: its observation line and, on error, the error kind.
pub struct Step {
    /// Its observation line.
    pub line: String,
    /// The error kind, if it failed.
    pub error: Option<String>,
}

/// An open replay: ops applied one at a time, the model inspectable between them.
pub struct Session {
    o: Observed,
    /// Ids seen so far, and the current op's data.
    data: OpData,
}

impl Session {
    /// Build from a trace's `config`; a refused config yields its `ConfigError` line.
    pub fn new(config: &Value) -> Result<Session, String> {
        Self::with_mutant(config, None)
    }

    /// A session over a model with a deliberate bug (see `ModelMutant`).
    pub fn with_mutant(config: &Value, mutant: Option<ModelMutant>) -> Result<Session, String> {
        let cfg = parse_config(config).map_err(|e| config_error_line(&e.0))?;
        let data = OpData::default();
        Ok(Session {
            o: Observed::new(cfg, mutant, &data),
            data,
        })
    }

    /// The init line.
    pub fn init_line(&self) -> String {
        let mut line = String::with_capacity(256);
        render_init(&self.o.r, &self.data, &mut Observer::default(), &mut line);
        line
    }

    /// Apply op number `i`; a lookup is consumed only by the very next op.
    pub fn apply(&mut self, i: usize, op: &Value) -> Step {
        self.data.clear_ops();
        let op = compile_op(op, &mut self.data);
        let error = self.o.step(&self.data, i, op);
        Step {
            line: self.o.line().to_string(),
            error: error.map(str::to_string),
        }
    }

    /// Apply an op without building its observation line (benchmarks):
    /// returns the error kind if the op failed.
    pub fn apply_quiet(&mut self, op: &Value) -> Option<String> {
        self.data.clear_ops();
        let op = compile_op(op, &mut self.data);
        match self.o.r.apply(&self.data, op) {
            Ok(_) => None,
            Err(OpError::Invalid(_)) => Some("InvalidOp".into()),
            Err(OpError::Model(p)) => Some(p.kind.to_string()),
        }
    }

    /// The model.
    pub fn kv(&self) -> &KvCacheManager {
        self.o.r.kv()
    }

    /// Mutable access, for tests that corrupt the model on purpose.
    pub fn kv_mut(&mut self) -> &mut KvCacheManager {
        self.o.r.kv_mut()
    }

    /// Live requests by trace id, in id order.
    pub fn live(&self) -> impl Iterator<Item = (&str, &Request)> {
        self.o
            .r
            .live_in_order()
            .map(|(k, _, l)| (self.data.ids.name(k), &l.req))
    }

    /// Whether the live request has an allocation not yet committed.
    pub fn uncommitted(&self, id: &str) -> Option<u64> {
        self.data
            .ids
            .get(id)
            .and_then(|k| self.o.r.get(k))
            .and_then(|l| l.uncommitted)
    }
}
