//! The typed 1.6.1 rank artifact: the top level and its `results[]` rows, read after the schema
//! layer has passed (so every required field is there with its type). Closed vocabularies stay
//! strings here: the schema layer reports their values. `engine` stays raw JSON (provenance whose
//! shape varies with the model).

use serde::Deserialize;
use serde_json::Value;

#[derive(Clone, Debug, Deserialize)]
pub struct Artifact {
    pub schema_version: u64,
    pub kvwarm: Option<Kvwarm>,
    pub artifact_type: String,
    pub status: String,
    pub valid: bool,
    pub usable: bool,
    pub stop_reason: Option<String>,
    pub timing_valid: bool,
    pub run_id: Option<String>,
    pub grid_digest: Option<String>,
    pub timing: Timing,
    pub dp: Dp,
    pub synchronization: Synchronization,
    pub coverage: Coverage,
    pub config: Config,
    pub limits: Limits,
    pub recurrent_state: RecurrentState,
    pub measurement_policy: Value,
    pub synthetic_prompts: Value,
    pub capacity: Capacity,
    pub cudagraph: Cudagraph,
    #[serde(default)]
    pub engine: Option<Value>,
    pub results: Vec<ResultRow>,
    pub iteration_groups: Vec<IterationGroup>,
    pub skipped_points: Vec<SkippedPoint>,
    pub missing_phases: Vec<String>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Timing {
    pub started_at: Option<String>,
    pub completed_at: Option<String>,
    pub benchmark_elapsed_seconds: f64,
    pub measured_iteration_seconds: f64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Dp {
    pub rank: u64,
    pub size: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Synchronization {
    pub enabled: bool,
    pub coordinator_rank: u64,
    pub port: Option<u64>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Coverage {
    pub expected_points: u64,
    pub completed_points: u64,
    pub skipped_points: u64,
}

/// `asdict(BenchmarkConfig)` (the fields the checks read).
#[derive(Clone, Debug, Deserialize)]
pub struct Config {
    pub mode: String,
    pub randomize_kda_state: bool,
    pub hybrid_live_state: bool,
    pub max_batch_size: Option<u64>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Limits {
    pub max_num_scheduled_tokens: u64,
    pub max_num_running_reqs: u64,
    pub max_model_len: u64,
    pub block_size: u64,
    pub num_gpu_blocks: Option<u64>,
    pub configured_max_batch_size: u64,
    pub feasible_max_batch_size: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub struct RecurrentState {
    pub initialization: String,
    pub policy: Option<String>,
    pub uniform_bound: Option<f64>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Capacity {
    pub common: Option<CapacityCommon>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct CapacityCommon {
    pub max_model_len: u64,
    pub max_num_scheduled_tokens: u64,
    pub max_num_running_reqs: u64,
    pub usable_blocks_without_watermark: u64,
    pub usable_blocks_with_watermark: u64,
    pub grid_invariants_digest: String,
    pub kvwarm_eligible: bool,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Cudagraph {
    pub mode: String,
    pub prefill_mode: String,
    pub decode_mode: String,
    pub max_capture_size: u64,
    pub capture_sizes: Vec<u64>,
    pub prefill_capture_sizes: Vec<u64>,
    pub decode_capture_sizes: Vec<u64>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Kvwarm {
    pub enabled: bool,
    pub warm_eligible: Option<bool>,
    pub skip_reason: Option<String>,
    pub dataset: Option<Value>,
    pub stages: Vec<Stage>,
    pub points_real_kv: u64,
    pub points_fake_fallback: u64,
    pub giant_kv_threshold: u64,
    pub giant_kv_repeats: u64,
    #[serde(default)]
    pub capacity_fallbacks: Option<Vec<CapacityFallback>>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct Stage {
    pub batch: Option<u64>,
    pub depth: Option<u64>,
    pub build_seconds: Option<f64>,
    pub failed: Option<bool>,
    pub vanished: Option<u64>,
    pub pool_shortfall: Option<u64>,
    pub soft_timeout: Option<bool>,
    pub group_fallback: Option<bool>,
}

impl Stage {
    /// A stage that was built (no `failed` key).
    pub fn built(&self) -> bool {
        self.failed != Some(true)
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct CapacityFallback {
    pub batch: u64,
    pub depth: u64,
    pub required_blocks: u64,
    pub usable_blocks: u64,
}

/// `asdict(BenchmarkPoint)`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Point {
    pub point_type: String,
    pub benchmark_id: u64,
    pub total_prefill_tokens: u64,
    pub total_kv_read_tokens: u64,
    pub batch_size: u64,
    pub expected_cudagraph_mode: String,
    pub expected_capture_size: Option<u64>,
    pub padding_tokens: Option<u64>,
    pub sample_reasons: Vec<String>,
    pub partition: Option<Value>,
    pub rows: Option<Vec<Vec<u64>>>,
}

impl Point {
    pub fn is_decode(&self) -> bool {
        self.point_type == "decode"
    }

    pub fn has(&self, reason: &str) -> bool {
        self.sample_reasons.iter().any(|r| r == reason)
    }

    /// The largest per-request context of a decode point: the writer splits the total evenly
    /// (`_balanced_partition`), so it is ceil(total / batch).
    pub fn max_context(&self) -> u64 {
        self.total_kv_read_tokens.div_ceil(self.batch_size.max(1))
    }

    /// The per-request contexts of a decode point (`_bench_decode_context_lengths`).
    pub fn contexts(&self) -> impl Iterator<Item = u64> {
        let b = self.batch_size.max(1);
        let (q, r) = (self.total_kv_read_tokens / b, self.total_kv_read_tokens % b);
        (0..b).map(move |i| q + u64::from(i < r))
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Scheduled {
    pub num_prefill_requests: u64,
    pub sum_prefill_tokens: u64,
    pub var_prefill_length: f64,
    pub sum_prefill_kv_tokens: u64,
    pub num_decode_requests: u64,
    pub sum_decode_kv_tokens: u64,
    pub var_decode_kv_tokens: f64,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Fpm {
    pub version: u64,
    pub worker_id: String,
    pub dp_rank: u64,
    pub counter_id: u64,
    pub wall_time: f64,
    pub scheduled_requests: Scheduled,
    pub queued_requests: Value,
    #[serde(default)]
    pub kvwarm_giant_median_of: Option<u64>,
    #[serde(default)]
    pub kvwarm_steady_sample: Option<bool>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ResultRow {
    pub point: Point,
    pub kv_seed_regime: String,
    pub fpms: Vec<Fpm>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct RankResult {
    pub dp_rank: u64,
    pub fpms: Vec<Fpm>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct IterationGroup {
    pub benchmark_id: u64,
    pub point: Point,
    pub expected_dp_ranks: Vec<u64>,
    pub complete: bool,
    pub wall_time: f64,
    pub rank_results: Vec<RankResult>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct SkippedPoint {
    pub point: Point,
    pub kv_seed_regime: String,
    pub reason: String,
}

impl Artifact {
    /// The negotiated value of a capacity limit, else the local one (`_bench_capacity_limit`).
    pub fn max_model_len(&self) -> u64 {
        self.capacity
            .common
            .as_ref()
            .map_or(self.limits.max_model_len, |c| c.max_model_len)
    }

    pub fn max_num_running_reqs(&self) -> u64 {
        self.capacity
            .common
            .as_ref()
            .map_or(self.limits.max_num_running_reqs, |c| c.max_num_running_reqs)
    }

    pub fn max_num_scheduled_tokens(&self) -> u64 {
        self.capacity
            .common
            .as_ref()
            .map_or(self.limits.max_num_scheduled_tokens, |c| c.max_num_scheduled_tokens)
    }

    /// Random KDA state switches the real/fake regimes to their `_random_kda` names; the writer
    /// records the resolved switch as `recurrent_state.initialization`.
    pub fn random_kda(&self) -> bool {
        self.recurrent_state.initialization == "random"
    }

    /// Every point the artifact names (results, then skips), with its JSON path.
    pub fn points(&self) -> impl Iterator<Item = (String, &Point)> {
        let r = self
            .results
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("$.results[{i}].point"), &r.point));
        let s = self
            .skipped_points
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("$.skipped_points[{i}].point"), &s.point));
        r.chain(s)
    }
}
