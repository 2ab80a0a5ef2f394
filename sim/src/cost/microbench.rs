//! The kernel microbenchmark suite (issue 21, item 2): small layouts designed so that, between
//! them, every kernel family the cost model prices is measured over its shape axes — decode
//! K/V over batch x context x KV heads x head dim x window and both kernels (tensor-core and
//! CUDA-core), MLA, `write_kv`, state updates over their serial length, the MoE router and
//! expert GEMMs over tokens x experts x top-k (routing replicated exactly, and once collapsed
//! on purpose), copies and zeroes, and the launch and host overheads every step carries.
//!
//! Each entry is a scenario and a planner strategy: `kvsim microbench plans` sweeps it into a
//! plan, `kvsim microbench run` replays every plan on the GPU with per-op timing (one device
//! command), and `kvsim calibrate` fits the profile on the results, reporting the residuals
//! per kernel family. The layouts are chosen along the axes, not copied from any evaluation
//! layout (`docs/timing/scenarios/unseen-*.json` stay unseen).

use kvsim_core::fpm::scenario_file::load_scenario_file;
use kvsim_core::fpm::scenarios::BuiltinScenario;
use serde_json::{json, Value};

/// The suite's manifest format tag.
pub const MANIFEST_FORMAT: &str = "kvsim-microbench/1";

/// How one entry's plan is replayed on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replay {
    /// Real content, token routing: the model replicates routing exactly.
    Plain,
    /// Synthetic positions zeroed and MoE routed on the attention output: routing collapses
    /// onto few experts at depth (docs/timing-history.md, experiment (a)); the results carry the
    /// device's routing counts, so the most loaded expert is measured, not assumed.
    CollapsedRouting,
}

/// One microbenchmark: a designed layout and how it is planned and replayed.
#[derive(Clone, Debug)]
pub struct Entry {
    /// File stem of its plan and results.
    pub name: &'static str,
    /// The kernel family it is designed to cover.
    pub family: &'static str,
    /// The axes it samples, in words.
    pub axes: &'static str,
    /// The planner strategy (`native`, `chain`, `synthetic`).
    pub strategy: &'static str,
    /// How its plan is replayed.
    pub replay: Replay,
    /// The scenario.
    pub scenario: BuiltinScenario,
}

/// A cache group of a scenario file.
fn group(kind: &str, block: u32, layers: u32, kv_heads: u32, head_dim: u32) -> Value {
    json!({"kind": kind, "block_size": block, "layers": layers, "kv_heads": kv_heads, "head_dim": head_dim})
}

/// A sliding-window group.
fn window(block: u32, layers: u32, kv_heads: u32, head_dim: u32, w: u32) -> Value {
    let mut g = group("sliding_window", block, layers, kv_heads, head_dim);
    g["sliding_window"] = json!(w);
    g
}

/// The shape of one entry's scenario beyond its groups.
struct Shape {
    experts: u32,
    top_k: u32,
    expert_parallel: bool,
    budget: u32,
    max_len: u32,
    pool: u32,
    captures: &'static [u32],
}

const CAPTURES: &[u32] = &[1, 4, 16, 64];

fn scenario(name: &str, description: &str, groups: Vec<Value>, s: &Shape) -> BuiltinScenario {
    let file = json!({
        "name": name,
        "description": description,
        "scenario": {
            "name": name,
            "model": {"groups": groups, "experts": s.experts, "top_k": s.top_k, "vocab_size": 129280},
            "pool_blocks": s.pool,
            "scheduler": {
                "max_num_seqs": 64,
                "max_num_batched_tokens": s.budget,
                "max_model_len": s.max_len,
                "enable_caching": true,
                "async_scheduling": false,
                "watermark": 0.0
            },
            "dp_ranks": 1,
            "seed": 21_0002
        },
        "bench": {
            "mode": "decode",
            "expert_parallel": s.expert_parallel,
            "random_kda": false,
            "decode_capture_sizes": s.captures,
            "samples": {
                "prefill_max_new_token_samples": 64,
                "prefill_max_kv_read_token_samples": 16,
                "decode_max_kv_read_token_samples": 4,
                "decode_max_batch_size_samples": 4,
                "prefix_max_batch_size_samples": 3
            },
            "giant_kv_threshold": 1_000_000,
            "giant_kv_repeats": 3,
            "timeout_seconds": 900
        }
    });
    load_scenario_file(&file.to_string()).unwrap_or_else(|e| panic!("microbench {name}: {e}"))
}

struct Spec {
    name: &'static str,
    family: &'static str,
    axes: &'static str,
    strategy: &'static str,
    replay: Replay,
    groups: Vec<Value>,
    shape: Shape,
}

fn specs() -> Vec<Spec> {
    let s = |experts, top_k, expert_parallel, budget, max_len, pool| Shape {
        experts,
        top_k,
        expert_parallel,
        budget,
        max_len,
        pool,
        captures: CAPTURES,
    };
    vec![
        Spec {
            name: "attn-d64-kv1",
            family: "decode mma",
            axes: "head dim 64, 1 KV head, blocks of 16, full + 512 window; MoE 8 experts top-1",
            strategy: "native",
            replay: Replay::Plain,
            groups: vec![group("full_attention", 16, 8, 1, 64), window(16, 8, 1, 64, 512)],
            shape: s(8, 1, false, 2048, 8192, 40000),
        },
        Spec {
            name: "attn-d96-kv2",
            family: "decode mma",
            axes: "head dim 96, 2 KV heads, blocks of 32, full + 2048 window; MoE 16 experts top-2 (EP)",
            strategy: "native",
            replay: Replay::Plain,
            groups: vec![group("full_attention", 32, 6, 2, 96), window(32, 6, 2, 96, 2048)],
            shape: s(16, 2, true, 4096, 16384, 40000),
        },
        Spec {
            name: "attn-d128-kv8",
            family: "decode mma",
            axes: "head dim 128, 8 KV heads, blocks of 16, full + 128 window; MoE 32 experts top-4",
            strategy: "native",
            replay: Replay::Plain,
            groups: vec![group("full_attention", 16, 4, 8, 128), window(16, 4, 8, 128, 128)],
            shape: s(32, 4, false, 8192, 8192, 40000),
        },
        Spec {
            name: "attn-d256-kv4",
            family: "decode mma",
            axes: "head dim 256, 4 KV heads, blocks of 64, full + 4096 window; MoE 64 experts top-6 (EP)",
            strategy: "native",
            replay: Replay::Plain,
            groups: vec![group("full_attention", 64, 2, 4, 256), window(64, 2, 4, 256, 4096)],
            shape: s(64, 6, true, 4096, 16384, 12000),
        },
        Spec {
            name: "attn-d64-kv16",
            family: "decode mma",
            axes: "head dim 64, 16 KV heads, blocks of 32, full + 64 window; MoE 128 experts top-8",
            strategy: "native",
            replay: Replay::Plain,
            groups: vec![group("full_attention", 32, 4, 16, 64), window(32, 4, 16, 64, 64)],
            shape: s(128, 8, false, 2048, 8192, 20000),
        },
        Spec {
            name: "attn-generic-d80",
            family: "decode generic",
            axes: "head dim 80 (CUDA-core kernel), 2 KV heads, blocks of 16, full + 256 window; MoE 8 experts top-2",
            strategy: "native",
            replay: Replay::Plain,
            groups: vec![group("full_attention", 16, 4, 2, 80), window(16, 4, 2, 80, 256)],
            shape: s(8, 2, false, 4096, 8192, 40000),
        },
        Spec {
            name: "mla-d576",
            family: "decode latent_mma",
            axes: "MLA latent 576, blocks of 64, 8 layers; MoE 256 experts top-8 (EP); chain plan",
            strategy: "chain",
            replay: Replay::Plain,
            groups: vec![group("mla", 64, 8, 1, 576)],
            shape: s(256, 8, true, 4096, 8192, 12000),
        },
        Spec {
            name: "state-d32-h16",
            family: "state_update",
            axes: "state dim 32 x 16 heads x 6 layers, blocks of 16, budget 8192; MoE 32 experts top-2",
            strategy: "native",
            replay: Replay::Plain,
            groups: vec![group("full_attention", 16, 2, 2, 128), group("mamba", 16, 6, 16, 32)],
            shape: s(32, 2, false, 8192, 8192, 40000),
        },
        Spec {
            name: "state-d128-h4",
            family: "state_update",
            axes: "state dim 128 x 4 heads x 12 layers, blocks of 64, budget 8192; MoE 64 experts top-4 (EP)",
            strategy: "native",
            replay: Replay::Plain,
            groups: vec![group("full_attention", 64, 2, 4, 64), group("mamba", 64, 12, 4, 128)],
            shape: s(64, 4, true, 8192, 8192, 12000),
        },
        Spec {
            name: "state-d256-h8",
            family: "state_update",
            axes: "state dim 256 x 8 heads x 4 layers, blocks of 32, budget 4096; MoE 16 experts top-4",
            strategy: "native",
            replay: Replay::Plain,
            groups: vec![group("full_attention", 32, 4, 8, 128), group("mamba", 32, 4, 8, 256)],
            shape: s(16, 4, false, 4096, 8192, 20000),
        },
        Spec {
            name: "chain-copies",
            family: "copy_blocks zero_blocks",
            axes: "chain plan (copy-on-write and zeroed tails), head dim 128, 4 KV heads, blocks of 16, full attention; MoE 64 experts top-2 (EP)",
            strategy: "chain",
            replay: Replay::Plain,
            groups: vec![group("full_attention", 16, 6, 4, 128)],
            shape: s(64, 2, true, 4096, 8192, 40000),
        },
        Spec {
            name: "moe-collapsed",
            family: "moe",
            axes: "routing collapsed on purpose (zero synthetic KV, hidden-state routing): the most loaded expert up to the whole batch; 64 experts top-4",
            strategy: "synthetic",
            replay: Replay::CollapsedRouting,
            groups: vec![group("full_attention", 16, 4, 2, 128)],
            shape: s(64, 4, false, 4096, 16384, 40000),
        },
    ]
}

/// The suite, in run order.
pub fn suite() -> Vec<Entry> {
    specs()
        .into_iter()
        .map(|sp| Entry {
            name: sp.name,
            family: sp.family,
            axes: sp.axes,
            strategy: sp.strategy,
            replay: sp.replay,
            scenario: scenario(&format!("microbench-{}", sp.name), sp.axes, sp.groups, &sp.shape),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_a_valid_scenario_with_a_unique_name() {
        let suite = suite();
        let mut names: Vec<_> = suite.iter().map(|e| e.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), suite.len());
        assert!(suite.iter().any(|e| e.replay == Replay::CollapsedRouting));
    }
}
