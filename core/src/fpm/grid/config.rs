//! What the grid needs to know about the engine: the benchmark mode, the negotiated capacity
//! envelope, the scheduler facts feasibility depends on, CUDA-graph captures, sample limits, and a
//! caller-supplied per-request block need (the cache layout is modelled elsewhere).
//!
//! Source: `spec/research/dynamo_fpm.md` §1.1 (`BenchmarkConfig` sample limits and defaults),
//! §1.3 (capacity envelope, usable blocks), §1.4 (feasibility inputs), §2.2
//! (`_bench_blocks_per_req`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::cudagraph::CUDAGRAPH_MODE_NONE;

/// `BenchmarkConfig.mode` (§1.1): which phases run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BenchmarkMode {
    /// Prefill points only.
    Prefill,
    /// Decode points only.
    Decode,
    /// Both.
    #[default]
    Agg,
}

impl BenchmarkMode {
    /// Whether prefill points are measured.
    pub fn runs_prefill(self) -> bool {
        matches!(self, BenchmarkMode::Prefill | BenchmarkMode::Agg)
    }

    /// Whether decode points are measured.
    pub fn runs_decode(self) -> bool {
        matches!(self, BenchmarkMode::Decode | BenchmarkMode::Agg)
    }
}

/// The negotiated `_BenchmarkCapacityEnvelope` (§1.3, §6.1 `capacity.common`) minus its digests.
/// Under attention DP these are the minima over ranks; every grid rule reads only these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GridCapacity {
    /// The token budget per step.
    pub max_num_scheduled_tokens: u64,
    /// Request slots.
    pub max_num_running_reqs: u64,
    /// The model length.
    pub max_model_len: u64,
    /// Free blocks (live `get_num_free_blocks()`, else `num_gpu_blocks − 1`).
    pub usable_blocks_without_watermark: u64,
    /// The same minus `watermark_blocks`, floored at 0.
    pub usable_blocks_with_watermark: u64,
}

/// Scheduler and cache facts that prefill feasibility depends on (§1.4, §1.7 invariants digest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SchedulerShape {
    /// Scheduler block size; used by the Mamba block-aligned split (§1.4).
    pub block_size: u64,
    /// Prefix-cache hash granularity: prefill KV reads are multiples of it (§1.4 step 4).
    pub hash_block_size: u64,
    /// Prefix caching on.
    pub enable_prefix_caching: bool,
    /// Added to a measured prefill prompt before pricing its blocks (§1.4).
    #[serde(default)]
    pub num_lookahead_tokens: u64,
    /// `long_prefill_token_threshold`; 0 = off (§1.4 per-request chunking).
    #[serde(default)]
    pub long_prefill_token_threshold: u64,
    /// Hybrid align-mode Mamba rounds prefill chunks to block boundaries (§1.4).
    #[serde(default)]
    pub need_mamba_block_aligned_split: bool,
    /// `kv_cache_manager.use_eagle` (moves the last cacheable position back one block).
    #[serde(default)]
    pub use_eagle: bool,
    /// `_bench_eagle_cache_drop_tokens()`: tokens of the last matched block EAGLE recomputes;
    /// 0 without EAGLE or with the per-group lookup. The caller resolves it from the layout.
    #[serde(default)]
    pub eagle_cache_drop_tokens: u64,
}

impl SchedulerShape {
    /// Plain full-attention defaults: hash block = block, prefix caching on, nothing else.
    pub fn with_block_size(block_size: u64) -> Self {
        SchedulerShape {
            block_size,
            hash_block_size: block_size,
            enable_prefix_caching: true,
            num_lookahead_tokens: 0,
            long_prefill_token_threshold: 0,
            need_mamba_block_aligned_split: false,
            use_eagle: false,
            eagle_cache_drop_tokens: 0,
        }
    }

    /// KV-read unit: `max(1, hash_block_size)` as Dynamo computes it (§1.4).
    pub fn hash_unit(&self) -> u64 {
        self.hash_block_size.max(1)
    }
}

/// Phase CUDA-graph modes and capture sizes (§1.2, §6.1 `cudagraph`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CudagraphShape {
    /// `cudagraph_mode.mixed_mode()` name, e.g. `"PIECEWISE"`.
    #[serde(default = "mode_none")]
    pub prefill_mode: String,
    /// `cudagraph_mode.decode_mode()` name, e.g. `"FULL"`.
    #[serde(default = "mode_none")]
    pub decode_mode: String,
    /// Prefill capture sizes.
    #[serde(default)]
    pub prefill_capture_sizes: Vec<u64>,
    /// Unfiltered; the grid keeps only sizes ≤ `max_num_running_reqs` (§1.2, re-filtered after
    /// negotiation). Leave empty when the decode mode is `"NONE"`.
    #[serde(default)]
    pub decode_capture_sizes: Vec<u64>,
}

fn mode_none() -> String {
    CUDAGRAPH_MODE_NONE.to_string()
}

impl Default for CudagraphShape {
    fn default() -> Self {
        CudagraphShape {
            prefill_mode: mode_none(),
            decode_mode: mode_none(),
            prefill_capture_sizes: Vec::new(),
            decode_capture_sizes: Vec::new(),
        }
    }
}

/// Axis sample limits of `BenchmarkConfig` with the §1.1 defaults.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct SampleLimits {
    /// ≥ 2, default 64.
    pub prefill_max_new_token_samples: usize,
    /// ≥ 2, default 16.
    pub prefill_max_kv_read_token_samples: usize,
    /// ≥ 2, default 128.
    pub decode_max_kv_read_token_samples: usize,
    /// ≥ 2, default 128.
    pub decode_max_batch_size_samples: usize,
    /// ≥ 1, default 3 (prefill batch presets kept per total).
    pub prefix_max_batch_size_samples: usize,
}

impl Default for SampleLimits {
    fn default() -> Self {
        // dynamo_fpm.md §1.1 defaults.
        SampleLimits {
            prefill_max_new_token_samples: 64,
            prefill_max_kv_read_token_samples: 16,
            decode_max_kv_read_token_samples: 128,
            decode_max_batch_size_samples: 128,
            prefix_max_batch_size_samples: 3,
        }
    }
}

/// Everything the grid generator reads. The block need is passed separately (a function of the
/// cache layout, see [`BlockNeed`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GridConfig {
    /// Which phases run.
    #[serde(default)]
    pub mode: BenchmarkMode,
    /// The capacity envelope.
    pub capacity: GridCapacity,
    /// The scheduler's block sizes and caching.
    pub scheduler: SchedulerShape,
    /// CUDA-graph modes and sizes.
    #[serde(default)]
    pub cudagraph: CudagraphShape,
    /// Sample limits per axis.
    #[serde(default)]
    pub samples: SampleLimits,
    /// V-E `max_batch_size`: caps the decode batch axis when set (§1.1, §1.5 step 2).
    #[serde(default)]
    pub max_batch_size: Option<u64>,
}

impl GridConfig {
    /// `_bench_grid_usable_blocks` after negotiation (§1.3): the watermark is reserved when asked
    /// or when more than one request shares the pool.
    pub fn grid_usable_blocks(&self, batch_size: u64, reserve_watermark: bool) -> u64 {
        if reserve_watermark || batch_size > 1 {
            self.capacity.usable_blocks_with_watermark
        } else {
            self.capacity.usable_blocks_without_watermark
        }
    }

    /// Every problem with this config, or `Ok` (style: validate before first use, report all).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let s = &self.samples;
        // dynamo_fpm.md §1.1: the four axis limits are ≥ 2, the batch preset limit ≥ 1.
        for (field, value, minimum) in [
            ("prefill_max_new_token_samples", s.prefill_max_new_token_samples, 2),
            (
                "prefill_max_kv_read_token_samples",
                s.prefill_max_kv_read_token_samples,
                2,
            ),
            (
                "decode_max_kv_read_token_samples",
                s.decode_max_kv_read_token_samples,
                2,
            ),
            ("decode_max_batch_size_samples", s.decode_max_batch_size_samples, 2),
            ("prefix_max_batch_size_samples", s.prefix_max_batch_size_samples, 1),
        ] {
            if value < minimum {
                problems.push(ConfigProblem::SampleLimitTooSmall { field, value, minimum });
            }
        }
        if self.max_batch_size == Some(0) {
            problems.push(ConfigProblem::ZeroMaxBatchSize);
        }
        // DECISION: Dynamo floors a zero hash block size at 1 and reads a zero block size as
        // "unset"; kvsim rejects both so a malformed scenario fails loudly (style R3/R10).
        if self.scheduler.block_size == 0 {
            problems.push(ConfigProblem::ZeroBlockSize { field: "block_size" });
        }
        if self.scheduler.hash_block_size == 0 {
            problems.push(ConfigProblem::ZeroBlockSize {
                field: "hash_block_size",
            });
        }
        let c = &self.capacity;
        if c.usable_blocks_with_watermark > c.usable_blocks_without_watermark {
            problems.push(ConfigProblem::WatermarkAddsBlocks {
                with_watermark: c.usable_blocks_with_watermark,
                without_watermark: c.usable_blocks_without_watermark,
            });
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }
}

/// One thing wrong with a [`GridConfig`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ConfigProblem {
    /// A sample limit below its minimum.
    #[error("samples.{field} = {value} is below the minimum {minimum}")]
    SampleLimitTooSmall {
        /// The field.
        field: &'static str,
        /// Its value.
        value: usize,
        /// The minimum.
        minimum: usize,
    },
    /// `max_batch_size` of 0.
    #[error("max_batch_size must be positive when set")]
    ZeroMaxBatchSize,
    /// A block size of 0.
    #[error("scheduler.{field} must be positive")]
    ZeroBlockSize {
        /// The field.
        field: &'static str,
    },
    /// More usable blocks with the watermark than without.
    #[error(
        "usable_blocks_with_watermark {with_watermark} exceeds \
         usable_blocks_without_watermark {without_watermark}"
    )]
    WatermarkAddsBlocks {
        /// Usable blocks with the watermark.
        with_watermark: u64,
        /// Usable blocks without it.
        without_watermark: u64,
    },
}

/// Every problem found by [`GridConfig::validate`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("invalid grid config: {}", render_problems(.problems))]
pub struct ConfigError {
    /// Every problem.
    pub problems: Vec<ConfigProblem>,
}

fn render_problems(problems: &[ConfigProblem]) -> String {
    problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// One question to the block-need predictor: the arguments of `_bench_blocks_per_req` (§2.2)
/// that the grid uses (`resident_chain` is a kvwarm-only V-E argument and is not asked here).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockNeedQuery {
    /// Tokens of the request.
    pub num_tokens: u64,
    /// The request starts with a prefix-cache hit (measured prefill requests with KV > 0).
    pub has_cache_hit: bool,
    /// Cap admission-capped managers (sliding window, chunked local) at their peak reservation.
    pub apply_admission_cap: bool,
}

impl BlockNeedQuery {
    /// A request of `num_tokens` with no cache hit and no admission cap.
    pub fn plain(num_tokens: u64) -> Self {
        BlockNeedQuery {
            num_tokens,
            has_cache_hit: false,
            apply_admission_cap: false,
        }
    }
}

/// Shared-pool footprint of one request, summed over KV-cache groups (dynamo_fpm.md §2.2). The
/// grid treats it as an oracle supplied by whoever models the cache layout; it must agree with
/// that model's allocator, as vLLM's "blocks needed" predictor must.
pub trait BlockNeed {
    /// Blocks one request needs.
    fn blocks_per_req(&self, query: BlockNeedQuery) -> u64;
}

impl<F> BlockNeed for F
where
    F: Fn(BlockNeedQuery) -> u64,
{
    fn blocks_per_req(&self, query: BlockNeedQuery) -> u64 {
        self(query)
    }
}

/// The no-manager fallback of §2.2 and plain full attention: `ceil(tokens / block_size)`,
/// ignoring hits and caps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UniformBlockNeed {
    /// Tokens per block.
    pub block_size: u64,
}

impl BlockNeed for UniformBlockNeed {
    fn blocks_per_req(&self, query: BlockNeedQuery) -> u64 {
        query.num_tokens.div_ceil(self.block_size.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::small_config;
    use super::*;

    #[test]
    fn sample_limit_defaults_match_the_research() {
        let s = SampleLimits::default();
        assert_eq!(s.prefill_max_new_token_samples, 64);
        assert_eq!(s.prefill_max_kv_read_token_samples, 16);
        assert_eq!(s.decode_max_kv_read_token_samples, 128);
        assert_eq!(s.decode_max_batch_size_samples, 128);
        assert_eq!(s.prefix_max_batch_size_samples, 3);
    }

    #[test]
    fn config_parses_with_defaults_and_rejects_unknown_fields() {
        let json = serde_json::json!({
            "capacity": {"max_num_scheduled_tokens": 8, "max_num_running_reqs": 2,
                         "max_model_len": 64, "usable_blocks_without_watermark": 100,
                         "usable_blocks_with_watermark": 100},
            "scheduler": {"block_size": 4, "hash_block_size": 4, "enable_prefix_caching": true}
        });
        let cfg: GridConfig = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(cfg, small_config(BenchmarkMode::Agg));
        assert_eq!(cfg.cudagraph.decode_mode, "NONE");
        let mut bad = json;
        bad["samples"] = serde_json::json!({"prefill_max_new_token_samples": 4, "typo": 1});
        assert!(serde_json::from_value::<GridConfig>(bad).is_err());
    }

    #[test]
    fn validate_reports_every_problem() {
        let mut cfg = small_config(BenchmarkMode::Agg);
        assert_eq!(cfg.validate(), Ok(()));
        cfg.samples.prefill_max_new_token_samples = 1;
        cfg.samples.prefix_max_batch_size_samples = 0;
        cfg.max_batch_size = Some(0);
        cfg.scheduler.hash_block_size = 0;
        cfg.capacity.usable_blocks_with_watermark = 101;
        let err = cfg.validate().unwrap_err();
        assert_eq!(
            err.problems,
            vec![
                ConfigProblem::SampleLimitTooSmall {
                    field: "prefill_max_new_token_samples",
                    value: 1,
                    minimum: 2
                },
                ConfigProblem::SampleLimitTooSmall {
                    field: "prefix_max_batch_size_samples",
                    value: 0,
                    minimum: 1
                },
                ConfigProblem::ZeroMaxBatchSize,
                ConfigProblem::ZeroBlockSize {
                    field: "hash_block_size"
                },
                ConfigProblem::WatermarkAddsBlocks {
                    with_watermark: 101,
                    without_watermark: 100
                },
            ]
        );
        assert!(err.to_string().contains("prefix_max_batch_size_samples"));
    }

    #[test]
    fn usable_blocks_reserve_the_watermark_for_batches() {
        let mut cfg = small_config(BenchmarkMode::Agg);
        cfg.capacity.usable_blocks_without_watermark = 100;
        cfg.capacity.usable_blocks_with_watermark = 90;
        assert_eq!(cfg.grid_usable_blocks(1, false), 100);
        assert_eq!(cfg.grid_usable_blocks(1, true), 90);
        assert_eq!(cfg.grid_usable_blocks(2, false), 90);
    }

    #[test]
    fn block_need_from_a_closure_and_the_uniform_fallback() {
        let uniform = UniformBlockNeed { block_size: 16 };
        assert_eq!(uniform.blocks_per_req(BlockNeedQuery::plain(0)), 0);
        assert_eq!(uniform.blocks_per_req(BlockNeedQuery::plain(16)), 1);
        assert_eq!(uniform.blocks_per_req(BlockNeedQuery::plain(17)), 2);
        let capped = |q: BlockNeedQuery| {
            let base = q.num_tokens.div_ceil(4);
            if q.apply_admission_cap {
                base.min(3)
            } else {
                base
            }
        };
        let need: &dyn BlockNeed = &capped;
        let q = BlockNeedQuery {
            num_tokens: 40,
            has_cache_hit: false,
            apply_admission_cap: true,
        };
        assert_eq!(need.blocks_per_req(q), 3);
        assert_eq!(need.blocks_per_req(BlockNeedQuery::plain(40)), 10);
    }
}
