//! What the planner records about each measured execution, inside the plan, so
//! the artifact can be rebuilt from the plan alone (replay ⇒ same bytes).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::fpm::grid::{BenchmarkPoint, SampleReason};
use crate::invariants::record::{RegimeRow, RegimeStamp};
use crate::plan::{json_path, load_plan, Plan, PlanError};

/// One prompt's evidence: token ids as little-endian u32, SHA-256 (dynamo_fpm.md §6.6).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptEvidence {
    /// The request slot (0..B).
    pub slot: u64,
    /// Prompt tokens.
    pub num_tokens: u64,
    /// SHA-256 of the tokens as little-endian u32.
    pub sha256: String,
}

/// A `kvwarm.capacity_fallbacks` entry (seed 000: per execution, with benchmark_id).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CapacityFallback {
    /// The execution's point, if the fallback was per point.
    pub benchmark_id: Option<u64>,
    /// The batch size.
    pub batch: u64,
    /// The chain depth.
    pub depth: u64,
    /// Blocks the warm-up needed.
    pub required_blocks: u64,
    /// Blocks usable.
    pub usable_blocks: u64,
    /// KV read tokens of the point.
    pub total_kv_read_tokens: u64,
}

/// One decode execution on one rank.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionRecord {
    /// The rank.
    pub rank: u32,
    /// The point executed.
    pub point: BenchmarkPoint,
    /// How its KV was seeded (§5.2).
    pub kv_seed_regime: String,
    /// The timed steps: admission first, then the steady steps.
    pub timed_steps: Vec<u64>,
    /// Scheduled decode KV per timed step (`sum_decode_kv_tokens`) and its variance.
    pub decode_kv_tokens: Vec<u64>,
    /// Variance of the decode KV per timed step.
    pub decode_kv_variance: Vec<f64>,
    /// Evidence of each prompt.
    pub prompts: Vec<PromptEvidence>,
    /// Untimed prefill tokens spent warming this execution (native only).
    pub warm_prefill_tokens: u64,
}

impl ExecutionRecord {
    /// The row as the record invariants read it (AR-REGIME).
    pub fn regime_row(&self) -> RegimeRow<'_> {
        let reasons = &self.point.sample_reasons;
        let stamp = if reasons.contains(&SampleReason::KvwarmRealKv) {
            Some(RegimeStamp::RealKv)
        } else if reasons.contains(&SampleReason::KvwarmFakeFallback) {
            Some(RegimeStamp::FakeFallback)
        } else {
            None
        };
        RegimeRow {
            benchmark_id: self.point.benchmark_id,
            rank: self.rank,
            regime: &self.kv_seed_regime,
            stamp,
        }
    }
}

/// A `kvwarm.stages[]` entry (§5.3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageRecord {
    /// The rank.
    pub rank: u32,
    /// The point the stage serves.
    pub benchmark_id: u64,
    /// Chains built.
    pub batch: u64,
    /// Their depth.
    pub depth: u64,
    /// Steps the build took.
    pub steps: u64,
    /// The stage was abandoned at the soft deadline (§5.3 `soft_timeout: true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub soft_timeout: bool,
    /// The group verdict failed the stage on every rank (§5.3 `group_fallback: true`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub group_fallback: bool,
}

/// A `skipped_points[]` entry (§5.4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SkippedPoint {
    /// The point.
    pub benchmark_id: u64,
    /// Why it was not measured.
    pub reason: String,
}

/// [`load_plan`], with the plan's benchmark record (`Plan::benchmark`, JSON in the plan layer)
/// read as strictly as the rest: kvsim's commands load plans this way, so what they accept is
/// what `kvsim schema plan` describes.
pub fn load_plan_checked(text: &str) -> Result<Plan, PlanError> {
    let plan = load_plan(text)?;
    if let Some(b) = &plan.benchmark {
        serde_path_to_error::deserialize::<_, BenchmarkMeta>(b).map_err(|e| PlanError::Malformed {
            path: json_path("$.benchmark", &e.path().to_string()),
            message: e.into_inner().to_string(),
        })?;
    }
    Ok(plan)
}

/// The planner's record, stored in `Plan::benchmark`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BenchmarkMeta {
    /// The scenario's name.
    pub scenario: String,
    /// The strategy asked for (`auto`, `synthetic`, `native`, `chain`).
    pub requested_strategy: String,
    /// The warm-up flag.
    pub enabled: bool,
    /// The gate's verdict.
    pub warm_eligible: Option<bool>,
    /// Why the gate refused, if it did.
    pub skip_reason: Option<String>,
    /// `native_exact_context`, `shared_prefix_chain` or null (synthetic).
    pub initialization_strategy: Option<String>,
    /// The grid digest.
    pub grid_digest: String,
    /// Points in the grid.
    pub expected_points: u64,
    /// Giant-KV threshold.
    pub giant_kv_threshold: u64,
    /// Giant-KV repeats.
    pub giant_kv_repeats: u64,
    /// Usable blocks of the pool.
    pub usable_blocks: u64,
    /// Every decode execution, every rank.
    pub executions: Vec<ExecutionRecord>,
    /// Warm-up stages.
    pub stages: Vec<StageRecord>,
    /// Capacity fallbacks.
    pub capacity_fallbacks: Vec<CapacityFallback>,
    /// Untimed warm-up prefill tokens.
    pub untimed_prefill_tokens: u64,
    /// The grid config, as the artifact writes it.
    #[schemars(with = "crate::fpm::artifact_schema::Config")]
    pub config: serde_json::Value,
    /// `"timeout"` when the soft deadline stopped the sweep (§1.12).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Points skipped by the group (e.g. `stage_failed_under_attention_dp`, §7.4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<SkippedPoint>,
    /// `missing_phases` (§7.4: `decode` when an attention-DP grid kept no decode point).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_phases: Vec<String>,
}
