//! Shared helpers for kvsim integration tests: small hand-made plans.

pub mod schema;

use serde_json::{json, Value};

/// A tiny scenario: full attention (+ optional sliding window) with block size 4.
pub fn scenario(swa_window: Option<u64>, dp_ranks: u32, pool_blocks: u32) -> Value {
    let mut groups =
        vec![json!({"kind": "full_attention", "block_size": 4, "layers": 2, "kv_heads": 2, "head_dim": 8})];
    if let Some(w) = swa_window {
        groups.push(json!({"kind": "sliding_window", "sliding_window": w, "block_size": 4, "layers": 2, "kv_heads": 2, "head_dim": 8}));
    }
    json!({
        "name": "tiny",
        "model": {"groups": groups, "vocab_size": 100},
        "pool_blocks": pool_blocks,
        "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 64, "max_model_len": 64, "enable_caching": true},
        "dp_ranks": dp_ranks,
        "seed": 1
    })
}

/// A plan from a scenario and `[step, rank, [ops...]]` triples.
pub fn plan(scenario: Value, steps: Vec<(u64, u32, Vec<Value>)>) -> Value {
    let steps: Vec<Value> = steps
        .into_iter()
        .map(|(s, r, ops)| json!({"step": s, "rank": r, "ops": ops}))
        .collect();
    json!({"format": "kvsim-plan/1", "scenario": scenario, "steps": steps})
}

pub fn ids(v: &[u64]) -> Value {
    json!({"source": "ids", "ids": v})
}

/// Add a request with a prompt of `len` tokens that depends on its id, schedule
/// it whole and run its prefill with one sampled output token.
pub fn prefill(req: &str, len: u64) -> Vec<Value> {
    let offset: u64 = req.bytes().map(u64::from).sum();
    let prompt: Vec<u64> = (0..len).map(|t| (t + offset) % 100).collect();
    vec![
        json!({"op": "add_request", "req": req, "prompt": ids(&prompt)}),
        json!({"op": "schedule", "req": req, "num_new_tokens": len}),
        json!({"op": "forward", "batch": [{"req": req, "tokens": len, "output": [7]}]}),
        json!({"op": "process_outputs"}),
    ]
}
