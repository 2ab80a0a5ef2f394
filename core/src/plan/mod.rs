//! Plans: the data planners produce and executors run (spec/plan.md).
//!
//! A plan is a scenario (model layout, pool, scheduler config, ranks, seed) plus a
//! step-indexed list of scheduler steps. Every op carries what an executor needs;
//! nothing is left for it to guess. A recorded plan replays without its planner.

mod pyrandom;
mod recorded;
mod scenario;
mod steps;
mod tokens;
mod validate;

pub use recorded::{FailureKind, Observation, PlanSource, RecordedPoint};
pub use scenario::{GroupKindName, GroupLayout, ModelLayout, Scenario, SchedulerConfig};
pub use steps::{forward_tokens, BatchEntry, Expect, FaultSpec, Plan, PlanOp, ShadowGroup, Step, TailMode};
pub use tokens::{salted_at, Tokens};
pub use validate::{json_path, load_plan, validate, PlanError};

/// The plan format tag; bumped on any incompatible change.
pub const PLAN_FORMAT: &str = "kvsim-plan/1";

/// Nominal duration of one simulated step until the cost model replaces it: a fixed
/// launch overhead plus a per-token term. It orders events and gives FPMs a wall time;
/// it is not a performance prediction.
pub fn nominal_step_ns(tokens: u64) -> u64 {
    1_000_000 + 20 * tokens
}
