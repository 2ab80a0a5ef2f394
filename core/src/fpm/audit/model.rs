//! The typed 1.6.1 rank artifact: the top level and its `results[]` rows, read after the schema
//! layer has passed (so every required field is there with its type). Closed vocabularies stay
//! strings here: the schema layer reports their values. `engine` stays raw JSON (provenance whose
//! shape varies with the model).

use serde::Deserialize;
use serde_json::Value;

/// A Dynamo rank artifact as the audit reads it (schema version 2; spec/dynamo-artifact.md).
#[derive(Clone, Debug, Deserialize)]
pub struct Artifact {
    /// Always 2.
    pub schema_version: u64,
    /// The warm-up block.
    pub kvwarm: Option<Kvwarm>,
    /// The artifact's type tag.
    pub artifact_type: String,
    /// `complete`, `partial` or `failed`.
    pub status: String,
    /// Whether the artifact's measurements are valid.
    pub valid: bool,
    /// Whether a collector may use it.
    pub usable: bool,
    /// Why the sweep stopped early (`timeout`), if it did.
    pub stop_reason: Option<String>,
    /// Whether the timings are valid.
    pub timing_valid: bool,
    /// The run's id.
    pub run_id: Option<String>,
    /// SHA-256 of the grid.
    pub grid_digest: Option<String>,
    /// Start, end and elapsed times.
    pub timing: Timing,
    /// This rank and the attention-DP size.
    pub dp: Dp,
    /// The rank synchronizer's settings.
    pub synchronization: Synchronization,
    /// Expected, completed and skipped points.
    pub coverage: Coverage,
    /// The benchmark configuration.
    pub config: Config,
    /// The scheduler limits the grid was built for.
    pub limits: Limits,
    /// How recurrent state was initialized.
    pub recurrent_state: RecurrentState,
    /// How samples are retained.
    pub measurement_policy: Value,
    /// How synthetic prompts are made.
    pub synthetic_prompts: Value,
    /// The negotiated capacity envelope.
    pub capacity: Capacity,
    /// The CUDA-graph capture settings.
    pub cudagraph: Cudagraph,
    /// The engine description, when present.
    #[serde(default)]
    pub engine: Option<Value>,
    /// Measured points.
    pub results: Vec<ResultRow>,
    /// Per point, every rank's FPMs (attention DP).
    pub iteration_groups: Vec<IterationGroup>,
    /// Points not measured, with why.
    pub skipped_points: Vec<SkippedPoint>,
    /// Phases with no point.
    pub missing_phases: Vec<String>,
    /// The error that failed the run, if any.
    pub error: Option<String>,
}

/// `timing`: wall-clock start, end and durations.
#[derive(Clone, Debug, Deserialize)]
pub struct Timing {
    /// When the sweep started.
    pub started_at: Option<String>,
    /// When it ended.
    pub completed_at: Option<String>,
    /// Seconds the sweep took.
    pub benchmark_elapsed_seconds: f64,
    /// Seconds spent in measured steps.
    pub measured_iteration_seconds: f64,
}

/// `dp`: this rank and the number of attention-DP ranks.
#[derive(Clone, Debug, Deserialize)]
pub struct Dp {
    /// This rank.
    pub rank: u64,
    /// Attention-DP ranks.
    pub size: u64,
}

/// `synchronization`: the cross-rank synchronizer.
#[derive(Clone, Debug, Deserialize)]
pub struct Synchronization {
    /// The warm-up flag (`DYN_BENCH_KV_WARMUP`).
    pub enabled: bool,
    /// The rank that coordinates.
    pub coordinator_rank: u64,
    /// Its port.
    pub port: Option<u64>,
}

/// `coverage`: how much of the grid was measured.
#[derive(Clone, Debug, Deserialize)]
pub struct Coverage {
    /// Points in the grid.
    pub expected_points: u64,
    /// Points measured.
    pub completed_points: u64,
    /// Points not measured, with why.
    pub skipped_points: u64,
}

/// `asdict(BenchmarkConfig)` (the fields the checks read).
#[derive(Clone, Debug, Deserialize)]
pub struct Config {
    /// `prefill`, `decode` or `agg`.
    pub mode: String,
    /// Random KDA state on.
    pub randomize_kda_state: bool,
    /// Live hybrid state on (a later Dynamo version).
    pub hybrid_live_state: bool,
    /// The configured batch cap, if any.
    pub max_batch_size: Option<u64>,
}

/// `limits`: the scheduler limits.
#[derive(Clone, Debug, Deserialize)]
pub struct Limits {
    /// The token budget per step.
    pub max_num_scheduled_tokens: u64,
    /// Request slots.
    pub max_num_running_reqs: u64,
    /// The model length.
    pub max_model_len: u64,
    /// Tokens per block.
    pub block_size: u64,
    /// Blocks in the pool.
    pub num_gpu_blocks: Option<u64>,
    /// The batch cap configured.
    pub configured_max_batch_size: u64,
    /// The largest batch the pool holds.
    pub feasible_max_batch_size: u64,
}

/// `recurrent_state`: how state layers start.
#[derive(Clone, Debug, Deserialize)]
pub struct RecurrentState {
    /// The initialization policy's name.
    pub initialization: String,
    /// The random policy, if any.
    pub policy: Option<String>,
    /// The bound of uniform random state.
    pub uniform_bound: Option<f64>,
}

/// `capacity`: the capacity envelope negotiated across ranks.
#[derive(Clone, Debug, Deserialize)]
pub struct Capacity {
    /// The minima over ranks.
    pub common: Option<CapacityCommon>,
}

/// `capacity.common`: the negotiated envelope (§1.3).
#[derive(Clone, Debug, Deserialize)]
pub struct CapacityCommon {
    /// The model length.
    pub max_model_len: u64,
    /// The token budget per step.
    pub max_num_scheduled_tokens: u64,
    /// Request slots.
    pub max_num_running_reqs: u64,
    /// Usable blocks.
    pub usable_blocks_without_watermark: u64,
    /// Usable blocks above the watermark.
    pub usable_blocks_with_watermark: u64,
    /// Digest of what the grid depends on.
    pub grid_invariants_digest: String,
    /// The negotiated gate verdict.
    pub kvwarm_eligible: bool,
}

/// `cudagraph`: capture modes and sizes.
#[derive(Clone, Debug, Deserialize)]
pub struct Cudagraph {
    /// `prefill`, `decode` or `agg`.
    pub mode: String,
    /// Mixed-batch capture mode.
    pub prefill_mode: String,
    /// Decode capture mode.
    pub decode_mode: String,
    /// The largest capture size.
    pub max_capture_size: u64,
    /// Every capture size.
    pub capture_sizes: Vec<u64>,
    /// Prefill capture sizes.
    pub prefill_capture_sizes: Vec<u64>,
    /// Decode capture sizes.
    pub decode_capture_sizes: Vec<u64>,
}

/// The `kvwarm` block: the warm-up's gate verdict, strategy, stages and counts (dynamo_fpm.md §6.2).
#[derive(Clone, Debug, Deserialize)]
pub struct Kvwarm {
    /// The warm-up flag (`DYN_BENCH_KV_WARMUP`).
    pub enabled: bool,
    /// The gate's verdict (null when the flag is off).
    pub warm_eligible: Option<bool>,
    /// Why the gate refused (§5.1), when it did.
    pub skip_reason: Option<String>,
    /// The dataset probed for chain content.
    pub dataset: Option<Value>,
    /// Per warm-up stage: batch, depth, build time, failures (§6.2).
    pub stages: Vec<Stage>,
    /// Decode points measured on real KV.
    pub points_real_kv: u64,
    /// Decode points that fell back to synthetic KV.
    pub points_fake_fallback: u64,
    /// `DYN_BENCH_GIANT_KV_THRESHOLD`: from this KV read size a point repeats its steady step (§9.1).
    pub giant_kv_threshold: u64,
    /// Steady steps a giant point repeats (§9.1).
    pub giant_kv_repeats: u64,
    /// Points whose warm-up did not fit the pool and fell back (§3.1).
    #[serde(default)]
    pub capacity_fallbacks: Option<Vec<CapacityFallback>>,
}

/// One `kvwarm.stages` entry.
#[derive(Clone, Debug, Deserialize)]
pub struct Stage {
    /// The stage's batch size.
    pub batch: Option<u64>,
    /// The chain depth built.
    pub depth: Option<u64>,
    /// Seconds the build took.
    pub build_seconds: Option<f64>,
    /// Whether it failed.
    pub failed: Option<bool>,
    /// Chains that vanished.
    pub vanished: Option<u64>,
    /// Blocks the pool lacked.
    pub pool_shortfall: Option<u64>,
    /// Whether the soft timeout ended it.
    pub soft_timeout: Option<bool>,
    /// Whether it fell back to per-group builds.
    pub group_fallback: Option<bool>,
}

impl Stage {
    /// A stage that was built (no `failed` key).
    pub fn built(&self) -> bool {
        self.failed != Some(true)
    }
}

/// One `kvwarm.capacity_fallbacks` entry.
#[derive(Clone, Debug, Deserialize)]
pub struct CapacityFallback {
    /// The stage's batch size.
    pub batch: u64,
    /// The chain depth built.
    pub depth: u64,
    /// Blocks the warm-up needed.
    pub required_blocks: u64,
    /// Blocks the pool had.
    pub usable_blocks: u64,
}

/// `asdict(BenchmarkPoint)`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Point {
    /// `prefill` or `decode`.
    pub point_type: String,
    /// The point's id.
    pub benchmark_id: u64,
    /// Prefill tokens of the point.
    pub total_prefill_tokens: u64,
    /// KV tokens the point reads.
    pub total_kv_read_tokens: u64,
    /// Requests in the batch.
    pub batch_size: u64,
    /// The CUDA-graph mode expected.
    pub expected_cudagraph_mode: String,
    /// The capture size expected, if any.
    pub expected_capture_size: Option<u64>,
    /// Padding up to the capture size.
    pub padding_tokens: Option<u64>,
    /// Why the point is in the grid (§5.4).
    pub sample_reasons: Vec<String>,
    /// A manifest's imbalanced split.
    pub partition: Option<Value>,
    /// A manifest's explicit per-request rows.
    pub rows: Option<Vec<Vec<u64>>>,
}

impl Point {
    /// Whether it is a decode point.
    pub fn is_decode(&self) -> bool {
        self.point_type == "decode"
    }

    /// Whether `reason` is among its sample reasons.
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

/// `scheduled_requests` of an FPM: what the step scheduled (§6.4).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Scheduled {
    /// Requests with prefill tokens in the step.
    pub num_prefill_requests: u64,
    /// Prefill tokens scheduled.
    pub sum_prefill_tokens: u64,
    /// Variance of the prefill lengths.
    pub var_prefill_length: f64,
    /// KV tokens the prefills read.
    pub sum_prefill_kv_tokens: u64,
    /// Decoding requests in the step.
    pub num_decode_requests: u64,
    /// KV tokens the decodes read.
    pub sum_decode_kv_tokens: u64,
    /// Variance of the decodes' KV reads.
    pub var_decode_kv_tokens: f64,
}

/// One forward-pass metric (FPM): a scheduler step's shape and wall time (§6.4).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Fpm {
    /// FPM format version.
    pub version: u64,
    /// The worker that measured it.
    pub worker_id: String,
    /// The attention-DP rank.
    pub dp_rank: u64,
    /// The step counter.
    pub counter_id: u64,
    /// Seconds the step took.
    pub wall_time: f64,
    /// What the step scheduled.
    pub scheduled_requests: Scheduled,
    /// What waited in the queues.
    pub queued_requests: Value,
    /// For a giant point: the steady samples its wall time is the upper median of.
    #[serde(default)]
    pub kvwarm_giant_median_of: Option<u64>,
    /// Whether the FPM is a steady step (not the admission step).
    #[serde(default)]
    pub kvwarm_steady_sample: Option<bool>,
}

/// One measured point with its FPMs (`results[]`).
#[derive(Clone, Debug, Deserialize)]
pub struct ResultRow {
    /// The benchmark point.
    pub point: Point,
    /// How the point's KV was seeded (`real_kv`, `fake_fallback`, `skip:<reason>`, …; §5.2).
    pub kv_seed_regime: String,
    /// The FPMs kept for the point.
    pub fpms: Vec<Fpm>,
}

/// One rank's FPMs of an iteration group.
#[derive(Clone, Debug, Deserialize)]
pub struct RankResult {
    /// The attention-DP rank.
    pub dp_rank: u64,
    /// The FPMs kept for the point.
    pub fpms: Vec<Fpm>,
}

/// One point measured across attention-DP ranks.
#[derive(Clone, Debug, Deserialize)]
pub struct IterationGroup {
    /// The point's id.
    pub benchmark_id: u64,
    /// The benchmark point.
    pub point: Point,
    /// The ranks expected.
    pub expected_dp_ranks: Vec<u64>,
    /// Whether every rank reported.
    pub complete: bool,
    /// Seconds the step took.
    pub wall_time: f64,
    /// Each rank's FPMs.
    pub rank_results: Vec<RankResult>,
}

/// A point not measured.
#[derive(Clone, Debug, Deserialize)]
pub struct SkippedPoint {
    /// The benchmark point.
    pub point: Point,
    /// How the point's KV was seeded (`real_kv`, `fake_fallback`, `skip:<reason>`, …; §5.2).
    pub kv_seed_regime: String,
    /// Why.
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

    /// `limits.max_num_running_reqs`, else the capacity envelope's.
    pub fn max_num_running_reqs(&self) -> u64 {
        self.capacity
            .common
            .as_ref()
            .map_or(self.limits.max_num_running_reqs, |c| c.max_num_running_reqs)
    }

    /// `limits.max_num_scheduled_tokens`, else the capacity envelope's.
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
