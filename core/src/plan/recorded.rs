//! What a plan recorded from a real planner carries beyond kvsim's own plans
//! (spec/plan.md §7): its provenance, the manager state observed after every
//! step, and the planner's failure.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The planner a recorded plan came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanSource {
    /// `dynamo`.
    pub planner: String,
    /// The ai-dynamo package version (1.6.1).
    pub version: String,
    /// The vLLM version it ran over.
    pub vllm: String,
    /// sha256 of the planner module that ran.
    pub source_sha256: String,
    /// The installed module ran (false: a `--planner-source` working copy).
    pub installed: bool,
    /// The benchmark points the planner injected, in order.
    #[serde(default)]
    pub points: Vec<RecordedPoint>,
}

/// One injected benchmark point of a recorded plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecordedPoint {
    /// The point's index (the `point` of its `inject_point` op).
    pub point: u64,
    /// The step it was injected in.
    pub step: u64,
    /// Requests in the batch.
    pub batch: u64,
    /// Each request's admitted context (one short of the measured one).
    pub context_lengths: Vec<u64>,
    /// `synthetic` (fake KV) or `shadow` (borrowed from a warm-up chain).
    pub kind: String,
    /// The attention-DP rank that injected it (every rank injects every point).
    #[serde(default, skip_serializing_if = "crate::serde_skip::is_zero")]
    pub rank: u32,
    /// An eager warm-up replica (dynamo_fpm.md §1.6): run, then discarded.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replica: bool,
}

/// The real manager's state at the end of a step.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Observation {
    /// Free blocks in the pool.
    pub free_blocks: u64,
    /// The first free-queue entries (the next blocks the pool hands out), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub free_head: Vec<u32>,
    /// Requests holding blocks in any group.
    pub live: u64,
    /// The block tables (per group) of every request whose tables changed in this step.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tables: BTreeMap<String, Vec<Vec<u32>>>,
    /// Requests that stopped holding blocks in this step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gone: Vec<String>,
    /// The block ids handed to the model runner disagreed with the manager's tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_mismatch: Option<String>,
    /// Pool edits the planner made that no plan op models.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unmodelled: Vec<String>,
}

/// How a recorded planner failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// A Python exception or assertion escaped the planner.
    Raised,
    /// The sweep did not end within the step budget.
    Stalled,
    /// The planner passed on, unchanged, the failure a `stage_failure` fault
    /// injected into a shadow registration: its abort path ran on the fault.
    Fault,
}
