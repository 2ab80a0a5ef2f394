//! `kvtrace/1` as kvsim writes it (`kvsim gen-traces`, the exhaustive pass's counterexamples):
//! `../shared/kvtrace/FORMAT.md` §2–§3. Closed where FORMAT.md lets readers ignore unknown op
//! fields: the schema describes kvsim's output, `kvsim trace` still reads what the format allows
//! (spec/kvtrace.md). Schema only: the writers build the JSON with `json!`.

#![allow(dead_code)] // never built, only described

use schemars::JsonSchema;

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Kvtrace {
    /// `kvtrace/1`.
    format: String,
    meta: Option<Meta>,
    config: Config,
    ops: Vec<Op>,
}

/// What kvsim's writers record about a trace (replayers ignore it).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Meta {
    /// `kvsim gen-traces`: `kvsim`, the seed, the trace's index and its layout.
    #[serde(default)]
    generator: Option<String>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    layout: Option<String>,
    /// The exhaustive pass: where it came from, the model mutant, what it found and its ops.
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    mutant: Option<String>,
    #[serde(default)]
    found: Option<String>,
    #[serde(default)]
    alphabet_ops: Option<Vec<String>>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Config {
    num_blocks: u64,
    enable_caching: bool,
    max_model_len: u64,
    block_size: u64,
    #[serde(default)]
    max_in_flight_tokens: Option<u64>,
    groups: Vec<Group>,
}

#[derive(JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Group {
    FullAttention {
        #[serde(default)]
        block_size: Option<u64>,
    },
    Mla {
        #[serde(default)]
        block_size: Option<u64>,
    },
    SlidingWindow {
        sliding_window: u64,
        #[serde(default)]
        block_size: Option<u64>,
    },
    ChunkedLocal {
        attention_chunk_size: u64,
        #[serde(default)]
        block_size: Option<u64>,
    },
    Mamba {
        mamba_cache_mode: MambaMode,
        #[serde(default)]
        block_size: Option<u64>,
    },
}

#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MambaMode {
    None,
    Align,
}

#[derive(JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    AddRequest {
        id: String,
        prompt: Vec<u64>,
        #[serde(default)]
        cache_salt: Option<String>,
    },
    NewStep,
    GetComputedBlocks {
        id: String,
    },
    AllocateSlots {
        id: String,
        num_new_tokens: u64,
        #[serde(default)]
        num_lookahead_tokens: u64,
        #[serde(default)]
        delay_cache_blocks: bool,
        #[serde(default)]
        full_sequence_must_fit: bool,
        #[serde(default)]
        use_computed: bool,
    },
    Commit {
        id: String,
        num_tokens: u64,
        #[serde(default)]
        output_tokens: Vec<u64>,
    },
    CacheBlocks {
        id: String,
        num_tokens: u64,
    },
    Preempt {
        id: String,
    },
    Free {
        id: String,
    },
    ResetPrefixCache,
}
