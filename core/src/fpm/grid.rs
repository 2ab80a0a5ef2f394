//! The FPM self-benchmark grid: which points Dynamo's self-benchmark measures, in which order,
//! under which ids — as pure functions of the negotiated capacity and a caller-supplied
//! per-request block need.
//!
//! Behaviour follows `spec/research/dynamo_fpm.md` §1 (V-A, `instrumented_scheduler.py`
//! in ai-dynamo/dynamo): axis helpers (§1.2), capacity (§1.3), prefill grid (§1.4), decode grid
//! (§1.5), eager warm-up replicas (§1.6), build order / numbering / digest (§1.7), decode repeats
//! (§1.10 step 4) and the retained-FPM rule (§1.11). Point field names follow §6.1.
//!
//! Layout:
//! - [`axis`]: sample axes and balanced partitions (§1.2);
//! - [`cudagraph`]: capture-size metadata and sample reasons (§1.2);
//! - [`point`]: `BenchmarkPoint`, its vocabulary and the stable `PointKey` (§6.1, §5.4);
//! - [`config`]: `GridConfig`, the capacity envelope and the `BlockNeed` hook (§1.1, §1.3, §2.2);
//! - [`prefill`] / [`decode`]: grid generation and feasibility (§1.4, §1.5);
//! - [`order`]: replicas, phase order, numbering and the digest (§1.6, §1.7);
//! - [`json`]: the canonical JSON points are hashed and compared by (a leaf: no grid imports);
//! - [`measure`]: decode admission, steady-step repeats and the retained FPM (§1.10, §1.11).

pub mod axis;
pub mod config;
pub mod cudagraph;
pub mod decode;
pub mod json;
pub mod measure;
pub mod order;
pub mod point;
pub mod prefill;

pub use axis::{
    balanced_partition, cudagraph_axis_points, limit_cudagraph_axis, powers_of_two_up_to, uniformly_limit_axis,
    AxisError, PartitionError, PartitionShape,
};
pub use config::{
    BenchmarkMode, BlockNeed, BlockNeedQuery, ConfigError, ConfigProblem, CudagraphShape, GridCapacity, GridConfig,
    SampleLimits, SchedulerShape, UniformBlockNeed,
};
pub use cudagraph::{
    cudagraph_metadata, expected_cudagraph_mode, normalize_capture_sizes, CudagraphMetadata, CUDAGRAPH_MODE_NONE,
};
pub use decode::{
    decode_capture_sizes, decode_context_lengths, decode_feasible_max_batch_size, decode_kv_read_points,
    decode_point_feasible, decode_steady_kv_tokens, generate_decode_grid, max_decode_kv_read_tokens,
};
pub use json::canonical_json;
pub use measure::{
    decode_admission, decode_step_plan, select_retained, DecodeAdmission, DecodeStepInput, DecodeStepPlan,
    EstimateMethod, GiantKvPolicy, RetainedFpm,
};
pub use order::{
    assemble_phases, build_grid, eager_warmup_points, generate_phases, grid_digest, number_points, point_digest,
    GeneratedPhases, Grid, GridEntry, GridError,
};
pub use point::{BenchmarkPoint, PointCoordinate, PointKey, PointType, SampleReason};
pub use prefill::{
    generate_prefill_grid, max_prefill_kv_read_tokens, prefill_batch_sizes, prefill_kv_read_points,
    prefill_new_token_axis, prefill_point_feasible, prefill_scheduled_tokens_per_req,
};

/// Shared fixtures for the grid's unit tests.
#[cfg(test)]
pub(crate) mod testutil {
    use super::config::{
        BenchmarkMode, CudagraphShape, GridCapacity, GridConfig, SampleLimits, SchedulerShape, UniformBlockNeed,
    };

    /// A small engine: 8 scheduled tokens, 2 running requests, 64-token model, 4-token blocks,
    /// 100 usable blocks either way, no CUDA graphs. The worked examples in the tests are
    /// derived by hand from this shape.
    pub(crate) fn small_config(mode: BenchmarkMode) -> GridConfig {
        GridConfig {
            mode,
            capacity: GridCapacity {
                max_num_scheduled_tokens: 8,
                max_num_running_reqs: 2,
                max_model_len: 64,
                usable_blocks_without_watermark: 100,
                usable_blocks_with_watermark: 100,
            },
            scheduler: SchedulerShape::with_block_size(4),
            cudagraph: CudagraphShape::default(),
            samples: SampleLimits::default(),
            max_batch_size: None,
        }
    }

    /// Full attention with `block_size`-token blocks: `ceil(tokens / block_size)`.
    pub(crate) fn ceil_need(block_size: u64) -> UniformBlockNeed {
        UniformBlockNeed { block_size }
    }
}
