//! The replayer: scheduler-side request state of FORMAT.md §2.2 plus one
//! observation line per op (§4).

use std::collections::BTreeMap;
use std::fmt::Write;

use serde_json::Value;

use super::config::parse_config;
use super::json::{push_ids, push_str, push_tables};
use super::ops::{self, Fields};
use super::TraceError;
use crate::kv::{AllocateArgs, ComputedBlocks, KvCacheManager, ModelMutant, PoolError, Request, RequestStatus};

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

struct Live {
    req: Request,
    /// `num_new_tokens` of the last successful allocation, until commit or preempt.
    uncommitted: Option<u64>,
}

struct Replayer {
    kv: KvCacheManager,
    live: BTreeMap<String, Live>,
    next_rid: u32,
}

enum OpError {
    Invalid(String),
    Model(PoolError),
}

impl From<String> for OpError {
    fn from(s: String) -> Self {
        OpError::Invalid(s)
    }
}

impl From<PoolError> for OpError {
    fn from(e: PoolError) -> Self {
        OpError::Model(e)
    }
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
    let (config, ops) = split_trace(v)?;
    let mut session = match Session::new(config) {
        Ok(s) => s,
        Err(line) => {
            return Ok(Replay {
                lines: vec![line],
                end: ReplayEnd::Stopped {
                    index: -1,
                    error: "ConfigError".into(),
                },
                ops: 0,
            })
        }
    };
    let mut lines = Vec::with_capacity(ops.len() + 1);
    lines.push(session.init_line());
    for (i, op) in ops.iter().enumerate() {
        let step = session.apply(i, op);
        lines.push(step.line);
        if let Some(error) = step.error {
            return Ok(Replay {
                lines,
                end: ReplayEnd::Stopped { index: i as i64, error },
                ops: i + 1,
            });
        }
    }
    Ok(Replay {
        lines,
        end: ReplayEnd::Completed,
        ops: ops.len(),
    })
}

/// One replayed op: its observation line and, on error, the error kind.
pub struct Step {
    pub line: String,
    pub error: Option<String>,
}

/// An open replay: ops are applied one at a time, and the model is inspectable
/// between them (property tests check invariants after every op).
pub struct Session {
    r: Replayer,
    pending: Option<(String, ComputedBlocks)>,
}

impl Session {
    /// Build from a trace's `config`; a refused config yields its `ConfigError` line.
    pub fn new(config: &Value) -> Result<Session, String> {
        Self::with_mutant(config, None)
    }

    /// A session over a model with a deliberate bug (see `ModelMutant`).
    pub fn with_mutant(config: &Value, mutant: Option<ModelMutant>) -> Result<Session, String> {
        let cfg = parse_config(config).map_err(|e| {
            let mut line = String::from("{\"error\":\"ConfigError\",\"i\":-1,\"message\":");
            push_str(&mut line, &e.0);
            line.push_str(",\"op\":\"init\",\"result\":null}");
            line
        })?;
        let kv = KvCacheManager::with_mutant(cfg, mutant).expect("validated by parse_config");
        Ok(Session {
            r: Replayer {
                kv,
                live: BTreeMap::new(),
                next_rid: 0,
            },
            pending: None,
        })
    }

    pub fn init_line(&self) -> String {
        let init = format!(
            "{{\"coordinator\":\"{}\",\"hash_block_size\":{},\"scheduler_block_size\":{}}}",
            self.r.kv.coordinator_kind().name(),
            self.r.kv.hash_block_size(),
            self.r.kv.scheduler_block_size()
        );
        self.r.observe(-1, Some("init"), &init, None)
    }

    /// Apply op number `i`; a lookup is consumed only by the very next op.
    pub fn apply(&mut self, i: usize, op: &Value) -> Step {
        let fields = op.as_object();
        let name = fields.and_then(|f| f.get("op")).and_then(Value::as_str);
        let lookup = self.pending.take();
        let outcome = match fields {
            None => Err(OpError::Invalid("an op must be an object".into())),
            Some(f) => self.r.apply(name, f, lookup, &mut self.pending),
        };
        match outcome {
            Ok(result) => Step {
                line: self.r.observe(i as i64, name, &result, None),
                error: None,
            },
            Err(e) => {
                let (kind, msg) = match e {
                    OpError::Invalid(m) => ("InvalidOp".to_string(), m),
                    OpError::Model(p) => (p.kind.to_string(), p.message),
                };
                let line = self.r.observe(i as i64, name, "null", Some((&kind, &msg)));
                Step {
                    line,
                    error: Some(kind),
                }
            }
        }
    }

    /// Apply op number `i` without building its observation line (benchmarks):
    /// returns the error kind if the op failed.
    pub fn apply_quiet(&mut self, op: &Value) -> Option<String> {
        let fields = op.as_object();
        let name = fields.and_then(|f| f.get("op")).and_then(Value::as_str);
        let lookup = self.pending.take();
        match fields {
            None => Some("InvalidOp".into()),
            Some(f) => match self.r.apply(name, f, lookup, &mut self.pending) {
                Ok(_) => None,
                Err(OpError::Invalid(_)) => Some("InvalidOp".into()),
                Err(OpError::Model(p)) => Some(p.kind.to_string()),
            },
        }
    }

    pub fn kv(&self) -> &KvCacheManager {
        &self.r.kv
    }

    /// Mutable access, for tests that corrupt the model on purpose.
    pub fn kv_mut(&mut self) -> &mut KvCacheManager {
        &mut self.r.kv
    }

    /// Live requests by trace id.
    pub fn live(&self) -> impl Iterator<Item = (&str, &Request)> {
        self.r.live.iter().map(|(k, l)| (k.as_str(), &l.req))
    }

    /// Whether the live request has an allocation not yet committed.
    pub fn uncommitted(&self, id: &str) -> Option<u64> {
        self.r.live.get(id).and_then(|l| l.uncommitted)
    }
}

impl Replayer {
    fn live(&self, id: &str) -> Result<&Live, String> {
        self.live.get(id).ok_or_else(|| format!("unknown request id {id:?}"))
    }

    fn apply(
        &mut self,
        name: Option<&str>,
        f: Fields,
        lookup: Option<(String, ComputedBlocks)>,
        pending: &mut Option<(String, ComputedBlocks)>,
    ) -> Result<String, OpError> {
        match name {
            Some("add_request") => self.add_request(f),
            Some("new_step") => {
                self.kv.new_step_starts();
                Ok("null".into())
            }
            Some("get_computed_blocks") => {
                let id = ops::id(f)?;
                let l = self.live(id)?;
                if l.req.status == RequestStatus::Running || l.req.num_computed_tokens != 0 {
                    return Err(
                        "get_computed_blocks needs a waiting or preempted request without blocks"
                            .to_string()
                            .into(),
                    );
                }
                let hit = self.kv.get_computed_blocks(&l.req);
                let mut out = String::from("{\"block_ids\":");
                push_tables(&mut out, &hit.blocks);
                let _ = write!(
                    out,
                    ",\"num_computed_tokens\":{},\"shared_prefix_boundary\":{}}}",
                    hit.num_computed_tokens, hit.shared_prefix_boundary
                );
                let l = self.live.get_mut(id).expect("checked live");
                l.req.shared_prefix_boundary = hit.shared_prefix_boundary;
                *pending = Some((id.to_string(), hit));
                Ok(out)
            }
            Some("allocate_slots") => self.allocate_slots(f, lookup),
            Some("commit") => self.commit(f),
            Some("cache_blocks") => {
                let id = ops::id(f)?;
                let n = ops::int(f, "num_tokens", None)?;
                let l = self.live(id)?;
                if n > l.req.num_computed_tokens {
                    return Err(format!(
                        "num_tokens {n} exceeds num_computed_tokens {}",
                        l.req.num_computed_tokens
                    )
                    .into());
                }
                let req = &self.live[id].req;
                self.kv.cache_blocks(req, n)?;
                Ok("null".into())
            }
            Some("preempt") => {
                let id = ops::id(f)?;
                let rid = {
                    let l = self.live(id)?;
                    if l.req.status != RequestStatus::Running {
                        return Err("preempt needs a running request".to_string().into());
                    }
                    l.req.id
                };
                self.kv.free(rid);
                let l = self.live.get_mut(id).expect("checked live");
                l.req.num_computed_tokens = 0;
                l.req.status = RequestStatus::Preempted;
                l.uncommitted = None;
                Ok("null".into())
            }
            Some("free") => {
                let id = ops::id(f)?;
                let rid = self.live(id)?.req.id;
                self.kv.free(rid);
                self.live.remove(id);
                Ok("null".into())
            }
            Some("reset_prefix_cache") => Ok(self.kv.reset_prefix_cache().to_string()),
            Some(other) => Err(format!("unknown op {other:?}").into()),
            None => Err("missing op name".to_string().into()),
        }
    }

    fn add_request(&mut self, f: Fields) -> Result<String, OpError> {
        let id = ops::id(f)?;
        if self.live.contains_key(id) {
            return Err(format!("request id {id:?} is already live").into());
        }
        let prompt = ops::tokens(f, "prompt", true)?;
        let max = self.kv.config.max_model_len;
        if prompt.is_empty() || prompt.len() as u64 >= max {
            return Err(format!("prompt length {} must be in [1, max_model_len={max})", prompt.len()).into());
        }
        let salt = match f.get("cache_salt") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => return Err(format!("cache_salt must be a string or null, got {v}").into()),
        };
        let rid = self.next_rid;
        self.next_rid += 1;
        let req = Request::new(rid, prompt, salt, self.kv.request_hash_block_size());
        self.live.insert(id.to_string(), Live { req, uncommitted: None });
        Ok("null".into())
    }

    fn allocate_slots(&mut self, f: Fields, lookup: Option<(String, ComputedBlocks)>) -> Result<String, OpError> {
        let id = ops::id(f)?;
        let num_new_tokens = ops::int(f, "num_new_tokens", None)?;
        if num_new_tokens < 1 {
            return Err("num_new_tokens must be >= 1".to_string().into());
        }
        let num_lookahead_tokens = ops::int(f, "num_lookahead_tokens", Some(0))?;
        let delay_cache_blocks = ops::flag(f, "delay_cache_blocks", false)?;
        let full_sequence_must_fit = ops::flag(f, "full_sequence_must_fit", false)?;
        let use_computed = ops::flag(f, "use_computed", true)?;
        let l = self.live(id)?;
        if l.uncommitted.is_some() {
            return Err("the request's last allocation is not committed yet".to_string().into());
        }
        let hits = match lookup {
            Some((lid, hit)) if use_computed && lid == id => Some(hit),
            _ => None,
        };
        let hit_tokens = hits.as_ref().map_or(0, |h| h.num_computed_tokens);
        if l.req
            .num_computed_tokens
            .saturating_add(hit_tokens)
            .saturating_add(num_new_tokens)
            > l.req.num_tokens()
        {
            return Err("allocation beyond the request's known tokens".to_string().into());
        }
        let args = AllocateArgs {
            num_new_tokens,
            hits: hits.as_ref(),
            num_lookahead_tokens,
            delay_cache_blocks,
            full_sequence_must_fit,
            reserved_blocks: 0,
        };
        match self.kv.allocate_slots(&self.live[id].req, args)? {
            None => Ok("null".into()),
            Some(new_blocks) => {
                let l = self.live.get_mut(id).expect("checked live");
                l.req.num_computed_tokens += hit_tokens;
                l.req.status = RequestStatus::Running;
                l.uncommitted = Some(num_new_tokens);
                let mut out = String::from("{\"block_ids\":");
                push_tables(&mut out, &new_blocks);
                out.push('}');
                Ok(out)
            }
        }
    }

    fn commit(&mut self, f: Fields) -> Result<String, OpError> {
        let id = ops::id(f)?;
        let n = ops::int(f, "num_tokens", None)?;
        let outputs = ops::tokens(f, "output_tokens", false)?;
        let max = self.kv.config.max_model_len;
        let l = self.live(id)?;
        if l.req.status != RequestStatus::Running || l.uncommitted.is_none() {
            return Err("commit needs a running request with an uncommitted allocation"
                .to_string()
                .into());
        }
        if l.uncommitted != Some(n) {
            return Err(format!("num_tokens {n} differs from the allocation's {:?}", l.uncommitted).into());
        }
        if !outputs.is_empty() {
            if l.req.num_computed_tokens.saturating_add(n) != l.req.num_tokens() {
                return Err("output tokens before every known token is computed".to_string().into());
            }
            if l.req.num_tokens() + outputs.len() as u64 > max {
                return Err("output tokens beyond max_model_len".to_string().into());
            }
        }
        let l = self.live.get_mut(id).expect("checked live");
        l.req.num_computed_tokens += n;
        l.req.append_output(&outputs);
        l.uncommitted = None;
        Ok("null".into())
    }

    /// One observation line: the op's result plus the state after it (§4).
    fn observe(&self, i: i64, op: Option<&str>, result: &str, error: Option<(&str, &str)>) -> String {
        let pool = &self.kv.pool;
        let mut s = String::with_capacity(256);
        s.push_str("{\"cached_block_ids\":");
        push_ids(&mut s, pool.cached_block_ids());
        let _ = write!(s, ",\"cached_blocks\":{}", pool.num_cached_keys());
        if let Some((kind, _)) = error {
            s.push_str(",\"error\":");
            push_str(&mut s, kind);
        }
        let _ = write!(s, ",\"free_blocks\":{},\"free_queue\":", pool.num_free_blocks());
        push_ids(&mut s, pool.free_queue());
        let _ = write!(s, ",\"i\":{i}");
        if let Some((_, msg)) = error {
            s.push_str(",\"message\":");
            push_str(&mut s, msg);
        }
        s.push_str(",\"op\":");
        match op {
            Some(name) => push_str(&mut s, name),
            None => s.push_str("null"),
        }
        s.push_str(",\"requests\":{");
        for (k, (id, l)) in self.live.iter().enumerate() {
            if k > 0 {
                s.push(',');
            }
            push_str(&mut s, id);
            s.push(':');
            push_tables(&mut s, &self.kv.get_block_ids(l.req.id));
        }
        s.push_str("},\"result\":");
        s.push_str(result);
        s.push('}');
        s
    }
}
