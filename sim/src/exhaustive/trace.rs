//! Op sequences as kvtrace/1 files (`spec/kvtrace-format.md`), and their
//! replay through `Session` with the model invariants checked after every op.

use kvsim_core::invariants::model::check_model;
use kvsim_core::invariants::Violation;
use kvsim_core::kv::{GroupKind, KvConfig, ModelMutant};
use kvsim_core::kvtrace::{split_trace, Session};
use serde_json::{json, Value};

use super::system::{Op, State, System, REQUEST_NAMES};

/// The trace `config` object that builds `c` (parsed back by `Session`).
pub fn config_json(c: &KvConfig) -> Value {
    let groups: Vec<Value> = c
        .groups
        .iter()
        .map(|g| match g.kind {
            GroupKind::SlidingWindow { sliding_window } => {
                json!({"kind": "sliding_window", "sliding_window": sliding_window, "block_size": g.block_size})
            }
            kind => json!({"kind": kind.name(), "block_size": g.block_size}),
        })
        .collect();
    json!({
        "num_blocks": c.num_blocks,
        "enable_caching": c.enable_caching,
        "max_model_len": c.max_model_len,
        "block_size": c.groups[0].block_size,
        "groups": groups,
    })
}

/// The kvtrace ops that `op` stands for in state `s` (one, or two for a lookup).
fn kvtrace_ops(sys: &System, s: &State, op: Op, out: &mut Vec<Value>) {
    let name = |r: u8| REQUEST_NAMES[r as usize];
    let slot = |r: u8| s.slots[r as usize].as_ref().expect("enabled ops name live requests");
    match op {
        Op::Add { req } => {
            let prompt = &sys.prompts[req as usize];
            out.push(json!({"op": "add_request", "id": name(req), "prompt": prompt, "cache_salt": null}));
        }
        Op::Allocate {
            req,
            num_new_tokens,
            lookup,
            delay,
        } => {
            if lookup {
                out.push(json!({"op": "get_computed_blocks", "id": name(req)}));
            }
            out.push(json!({
                "op": "allocate_slots", "id": name(req), "num_new_tokens": num_new_tokens,
                "delay_cache_blocks": delay,
            }));
        }
        Op::Commit { req } => {
            let sl = slot(req);
            let n = sl.uncommitted.expect("commit is enabled only when uncommitted");
            let outputs: Vec<u64> = sys.commit_output(sl).into_iter().collect();
            out.push(json!({"op": "commit", "id": name(req), "num_tokens": n, "output_tokens": outputs}));
        }
        Op::CacheBlocks { req } => {
            let n = slot(req).req.num_computed_tokens;
            out.push(json!({"op": "cache_blocks", "id": name(req), "num_tokens": n}));
        }
        Op::Preempt { req } => out.push(json!({"op": "preempt", "id": name(req)})),
        Op::Free { req } => out.push(json!({"op": "free", "id": name(req)})),
        Op::ResetPrefixCache => out.push(json!({"op": "reset_prefix_cache"})),
    }
}

/// A complete kvtrace/1 file replaying `ops` from the initial state; `meta` is
/// stored as is (replayers ignore it).
pub fn to_kvtrace(sys: &System, ops: &[Op], meta: Value) -> Value {
    let mut s = sys.init();
    let mut out = Vec::new();
    for &op in ops {
        kvtrace_ops(sys, &s, op, &mut out);
        sys.apply(&mut s, op);
    }
    json!({"format": "kvtrace/1", "meta": meta, "config": config_json(&sys.config), "ops": out})
}

/// How a checked replay ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replayed {
    /// kvtrace ops applied (the one that broke an invariant or raised included).
    pub ops_applied: usize,
    /// The first non-empty `check_model` result (after the init or after an op).
    pub violations: Vec<Violation>,
    /// The error kind of the op that stopped the replay, if one did.
    pub error: Option<String>,
}

/// Replay a kvtrace through `Session::with_mutant`, checking the model invariants
/// on the initial state and after every op; stops at the first violation or error.
pub fn replay_checked(trace: &Value, mutant: Option<ModelMutant>) -> Result<Replayed, String> {
    let (config, ops) = split_trace(trace).map_err(|e| e.to_string())?;
    let mut s = Session::with_mutant(config, mutant)?;
    let mut done = Replayed {
        ops_applied: 0,
        violations: check_model(s.kv(), &[]),
        error: None,
    };
    for (i, op) in ops.iter().enumerate() {
        if !done.violations.is_empty() {
            break;
        }
        let step = s.apply(i, op);
        done.ops_applied = i + 1;
        done.violations = check_model(s.kv(), &[]);
        done.error = step.error;
        if done.error.is_some() {
            break;
        }
    }
    Ok(done)
}
