//! An open replay: raw ops are applied one at a time and the model is
//! inspectable between them (the generator drives it online; property tests
//! check invariants after every op).

use serde_json::Value;

use super::compile::{compile_op, Op, OpData};
use super::config::parse_config;
use super::exec::{OpError, Replayer};
use super::json::push_str;
use super::observe::{Ending, Observer};
use crate::kv::{KvCacheManager, KvConfig, ModelMutant, Request};

/// One replayed op: its observation line and, on error, the error kind.
pub struct Step {
    pub line: String,
    pub error: Option<String>,
}

pub struct Session {
    r: Replayer,
    /// Ids seen so far, and the current op's data.
    data: OpData,
    obs: Observer,
}

/// The observation line of a refused config.
pub(super) fn config_error_line(message: &str) -> String {
    let mut line = String::from("{\"error\":\"ConfigError\",\"i\":-1,\"message\":");
    push_str(&mut line, message);
    line.push_str(",\"op\":\"init\",\"result\":null}");
    line
}

/// A replayer over a fresh model for an already validated config.
pub(super) fn replayer(cfg: KvConfig, mutant: Option<ModelMutant>) -> Replayer {
    Replayer::new(KvCacheManager::with_mutant(cfg, mutant).expect("validated by parse_config"))
}

/// Append the `init` line.
pub(super) fn init_line(r: &Replayer, data: &OpData, obs: &mut Observer, out: &mut String) {
    obs.refresh(r, &data.ids, (true, true));
    obs.line(r, -1, Some("init"), Ending::Init, out);
}

/// Apply op `i` and append its observation line; returns the error kind if it failed.
pub(super) fn observed_step(
    r: &mut Replayer,
    data: &OpData,
    obs: &mut Observer,
    i: usize,
    op: Op,
    out: &mut String,
) -> Option<&'static str> {
    let outcome = r.apply(data, op);
    let changes = r.take_changes();
    obs.refresh(r, &data.ids, changes);
    match outcome {
        Ok(o) => {
            obs.line(r, i as i64, op.name(data), Ending::Ok(o), out);
            None
        }
        Err(e) => {
            let (kind, message) = match e {
                OpError::Invalid(m) => ("InvalidOp", m),
                OpError::Model(p) => (p.kind, p.message),
            };
            let end = Ending::Error {
                kind,
                message: &message,
            };
            obs.line(r, i as i64, op.name(data), end, out);
            Some(kind)
        }
    }
}

impl Session {
    /// Build from a trace's `config`; a refused config yields its `ConfigError` line.
    pub fn new(config: &Value) -> Result<Session, String> {
        Self::with_mutant(config, None)
    }

    /// A session over a model with a deliberate bug (see `ModelMutant`).
    pub fn with_mutant(config: &Value, mutant: Option<ModelMutant>) -> Result<Session, String> {
        let cfg = parse_config(config).map_err(|e| config_error_line(&e.0))?;
        Ok(Session {
            r: replayer(cfg, mutant),
            data: OpData::default(),
            obs: Observer::default(),
        })
    }

    pub fn init_line(&self) -> String {
        let mut line = String::with_capacity(256);
        init_line(&self.r, &self.data, &mut Observer::default(), &mut line);
        line
    }

    /// Apply op number `i`; a lookup is consumed only by the very next op.
    pub fn apply(&mut self, i: usize, op: &Value) -> Step {
        self.data.clear_ops();
        let op = compile_op(op, &mut self.data);
        self.data.ids.rank_all();
        let mut line = String::with_capacity(256);
        let error = observed_step(&mut self.r, &self.data, &mut self.obs, i, op, &mut line);
        Step {
            line,
            error: error.map(str::to_string),
        }
    }

    /// Apply an op without building its observation line (benchmarks):
    /// returns the error kind if the op failed.
    pub fn apply_quiet(&mut self, op: &Value) -> Option<String> {
        self.data.clear_ops();
        let op = compile_op(op, &mut self.data);
        self.data.ids.rank_all();
        match self.r.apply(&self.data, op) {
            Ok(_) => None,
            Err(OpError::Invalid(_)) => Some("InvalidOp".into()),
            Err(OpError::Model(p)) => Some(p.kind.to_string()),
        }
    }

    pub fn kv(&self) -> &KvCacheManager {
        self.r.kv()
    }

    /// Mutable access, for tests that corrupt the model on purpose.
    pub fn kv_mut(&mut self) -> &mut KvCacheManager {
        self.r.kv_mut()
    }

    /// Live requests by trace id, in id order.
    pub fn live(&self) -> impl Iterator<Item = (&str, &Request)> {
        self.r.live_in_order().map(|(k, l)| (self.data.ids.name(k), &l.req))
    }

    /// Whether the live request has an allocation not yet committed.
    pub fn uncommitted(&self, id: &str) -> Option<u64> {
        self.data
            .ids
            .get(id)
            .and_then(|k| self.r.get(k))
            .and_then(|l| l.uncommitted)
    }
}
