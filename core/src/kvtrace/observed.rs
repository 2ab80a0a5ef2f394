//! A replay with observation lines, one op at a time: the replayer, the
//! observer that renders its state, and the current line. Shared by whole-trace
//! replays and by `Session`.

use super::compile::{Op, OpData};
use super::exec::{OpError, Replayer};
use super::json::push_str;
use super::observe::{Ending, Observer};
use crate::kv::{KvCacheManager, KvConfig, ModelMutant};

/// The observation line of a refused config.
pub fn config_error_line(message: &str) -> String {
    let mut line = String::from("{\"error\":\"ConfigError\",\"i\":-1,\"message\":");
    push_str(&mut line, message);
    line.push_str(",\"op\":\"init\",\"result\":null}");
    line
}

pub struct Observed {
    pub r: Replayer,
    obs: Observer,
    /// The last rendered line (no newline).
    line: String,
}

impl Observed {
    /// A replay over a fresh model for an already validated config, its
    /// `init` line rendered.
    pub fn new(cfg: KvConfig, mutant: Option<ModelMutant>, data: &OpData) -> Self {
        let kv = KvCacheManager::with_mutant(cfg, mutant).expect("validated by parse_config");
        let mut o = Observed {
            r: Replayer::new(kv),
            obs: Observer::default(),
            line: String::with_capacity(1024),
        };
        render_init(&o.r, data, &mut o.obs, &mut o.line);
        o.r.take_changes();
        o
    }

    pub fn line(&self) -> &str {
        &self.line
    }

    /// Apply op `i` and render its line; returns the error kind if it failed.
    pub fn step(&mut self, data: &OpData, i: usize, op: Op) -> Option<&'static str> {
        let outcome = self.r.apply(data, op);
        let changes = self.r.take_changes();
        self.obs.refresh(&self.r, &data.ids, changes);
        self.line.clear();
        let (i, name) = (i as i64, op.name(data));
        match outcome {
            Ok(o) => {
                self.obs.line(&self.r, i, name, Ending::Ok(o), &mut self.line);
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
                self.obs.line(&self.r, i, name, end, &mut self.line);
                Some(kind)
            }
        }
    }
}

/// Append the `init` line: the state as it is now, rendered afresh.
pub fn render_init(r: &Replayer, data: &OpData, obs: &mut Observer, out: &mut String) {
    obs.refresh(r, &data.ids, (true, true));
    obs.line(r, -1, Some("init"), Ending::Init, out);
}
