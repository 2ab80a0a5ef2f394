//! The JSON Schema shapes of the artifact's parts that `artifact.rs` builds with `json!`
//! (their keys come out sorted, so typed structs would reorder the bytes). Each mirrors
//! one `json!` there; `tests/tests/schemas.rs` validates every artifact the tests write
//! against the schema, so a field added on one side only fails there.

#![allow(dead_code)] // schema-only types: never built, only described

use schemars::JsonSchema;

use super::grid::{BenchmarkMode, BenchmarkPoint, EstimateMethod, SampleLimits};

/// One `kvwarm.stages[]` entry.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StageEntry {
    batch: u64,
    benchmark_id: u64,
    /// Scheduler steps the stage took to build.
    build_steps: u64,
    depth: u64,
    /// The group verdict failed the stage on every rank (attention DP).
    #[serde(default)]
    group_fallback: bool,
    /// Abandoned at the soft deadline.
    #[serde(default)]
    soft_timeout: bool,
}

/// `fpms[].queued_requests`: kvsim queues nothing, so every count is 0.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct QueuedRequests {
    num_decode_requests: u64,
    num_prefill_requests: u64,
    sum_decode_kv_tokens: u64,
    sum_prefill_tokens: u64,
    var_decode_kv_tokens: f64,
    var_prefill_length: f64,
}

/// `fpms[].benchmark_measurement` (the later Dynamo field, V-D/V-E).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct BenchmarkMeasurement {
    dp_rank: u32,
    estimate: Estimate,
    expected_internal_samples: u64,
    /// SHA-256 of the point's shape (64 hex digits).
    point_key: String,
    preparation: Preparation,
    prompts: Prompts,
    schema_version: u32,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Estimate {
    method: EstimateMethod,
    raw_sample_indices: Vec<u64>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Preparation {
    grid_digest: String,
    kv_seed_regime: String,
    /// The plan hash.
    plan: String,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Prompts {
    requests: Vec<PromptRequest>,
    /// SHA-256 of the compact request list.
    sha256: String,
    status: String,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct PromptRequest {
    num_tokens: u64,
    /// SHA-256 of the prompt's token ids as little-endian u32.
    sha256: String,
    slot: u64,
}

/// `timing`, on the simulator's nominal clock.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Timing {
    benchmark_elapsed_seconds: f64,
    clock: String,
    completed_at: String,
    measured_iteration_seconds: f64,
    started_at: String,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Dp {
    rank: u32,
    size: u32,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Synchronization {
    coordinator_rank: u32,
    enabled: bool,
    port: Option<u32>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Coverage {
    completed_points: u64,
    expected_points: u64,
    skipped_points: u64,
}

/// `config`: the scenario's benchmark settings; `timeout_seconds` is fractional when
/// `kvsim sweep --timeout-seconds` overrode it.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Config {
    decode_capture_sizes: Vec<u64>,
    expert_parallel: bool,
    giant_kv_repeats: u64,
    giant_kv_threshold: u64,
    mode: BenchmarkMode,
    random_kda: bool,
    samples: SampleLimits,
    #[serde(default)]
    shared_prompt_content: bool,
    timeout_seconds: f64,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Limits {
    block_size: u64,
    max_model_len: u64,
    max_num_running_reqs: u32,
    max_num_scheduled_tokens: u64,
    num_gpu_blocks: u32,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RecurrentState {
    /// `unchanged`, or `random` with random KDA.
    initialization: String,
    policy: Option<String>,
    uniform_bound: Option<f64>,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct MeasurementPolicy {
    decode: String,
    prefill: String,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SyntheticPrompts {
    mode: String,
    vocab_size: u64,
}

/// One `iteration_groups[]` entry.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct IterationGroup {
    benchmark_id: u64,
    complete: bool,
    expected_dp_ranks: Vec<u32>,
    point: BenchmarkPoint,
    rank_results: Vec<RankResult>,
    wall_time: f64,
}

#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RankResult {
    dp_rank: u32,
    fpms: Vec<super::artifact::Fpm>,
}

/// One `skipped_points[]` entry (kvsim's shape: no point, no regime).
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SkippedPoint {
    benchmark_id: u64,
    reason: String,
}

/// `point.partition` (a manifest's imbalanced split): never set by kvsim's grid, which writes
/// null; described closed so a typo is still caught.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Partition {
    axis: String,
    high_count: u64,
    fraction: f64,
}
