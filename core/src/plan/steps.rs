//! Plan steps and ops (spec/plan.md §3).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::scenario::Scenario;
use super::tokens::Tokens;

/// A `kvsim-plan/1` plan: a scenario plus the steps a planner took (spec/plan.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Always "kvsim-plan/1".
    pub format: String,
    /// The scenario.
    pub scenario: Scenario,
    /// Faults the executor injects (spec/plan.md §4).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<FaultSpec>,
    /// The steps.
    pub steps: Vec<Step>,
    /// What the benchmark planner recorded about its points (regimes, timed steps,
    /// prompt evidence); the artifact is rebuilt from it on replay.
    // JSON here (the plan layer knows no planner types): the sweep planner's `BenchmarkMeta`,
    // which `fpm::sweep::load_plan_checked` reads strictly and the plan schema describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub benchmark: Option<serde_json::Value>,
    /// Where a recorded plan came from (the real Dynamo planner; spec/plan.md §7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<super::recorded::PlanSource>,
}

/// One scheduler step of one rank. Steps run in `step` order; within a step,
/// ranks in ascending order; within a rank, ops in list order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// The step number.
    pub step: u64,
    /// The rank.
    #[serde(default)]
    pub rank: u32,
    /// Ops, in order.
    pub ops: Vec<PlanOp>,
}

/// What the plan expects an allocation to return (checked, never assumed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Prefix-cache hit tokens adopted at admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hit_tokens: Option<u64>,
    /// The request's whole block table per group after the allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tables: Option<Vec<Vec<u32>>>,
    /// The planner saw this allocation refused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refused: bool,
}

/// One request's share of a forward pass.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchEntry {
    /// The request.
    pub req: String,
    /// New tokens computed for this request in this pass.
    pub tokens: u64,
    /// Tokens sampled by this pass (appended when the output is processed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output: Vec<u64>,
}

/// How a shadow's private tail gets its content (dynamo_fpm.md §3.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TailMode {
    /// Copy-on-write of the chain's tail block.
    Cow,
    /// Fresh zeroed blocks.
    Zero,
}

/// A shadow's blocks in one group, as the planner registered them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShadowGroup {
    /// The chain's blocks the shadow references (nulls allowed), never written.
    pub shared: Vec<u32>,
    /// Private tail blocks drawn from the pool, in pool order.
    pub tail: Vec<u32>,
    /// The chain block copied into `tail[0]` (copy-on-write), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cow_from: Option<u32>,
    /// The chain blocks copied into `tail[1..]`, in order (Dynamo 1.6.1 copies
    /// every tail block from the chain block at the same index).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cow_more: Vec<u32>,
    /// The shadow's `num_cached_block` in this group: its blocks already in the
    /// prefix cache. Absent: the whole table (kvsim's port, after the seed PR);
    /// Dynamo 1.6.1 records the shared prefix only, so the shadow's own full tail
    /// blocks get cached under its salt (spec/dynamo.md §4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_cached: Option<u64>,
}

/// One op of a plan (spec/plan.md §3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum PlanOp {
    /// A new request arrives (waiting).
    AddRequest {
        /// The request's plan name.
        req: String,
        /// Its prompt.
        prompt: Tokens,
        /// Its cache salt.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_salt: Option<String>,
    },
    /// Admit or continue a request: prefix lookup (waiting requests) + `allocate_slots`.
    Schedule {
        /// The request.
        req: String,
        /// Tokens to schedule.
        num_new_tokens: u64,
        /// Read the prefix cache at admission.
        #[serde(default = "yes")]
        use_prefix_cache: bool,
        /// The whole sequence must fit (admission).
        #[serde(default)]
        full_sequence_must_fit: bool,
        /// Register blocks in the prefix cache later.
        #[serde(default)]
        delay_cache_blocks: bool,
        /// What the planner saw (checked).
        #[serde(default)]
        expect: Expect,
    },
    /// The forward pass: reads every needed KV position, writes the new ones.
    Forward {
        /// Each request's share.
        batch: Vec<BatchEntry>,
    },
    /// Outputs of earlier forwards are processed: placeholders land, fenced frees
    /// of processed steps are released. With `lag` = n, only forwards at least n
    /// steps old (the batch queue of async scheduling processes step k after
    /// scheduling step k + 1).
    ProcessOutputs {
        /// Steps the outputs land late.
        #[serde(default, skip_serializing_if = "crate::serde_skip::is_zero")]
        lag: u64,
    },
    /// Synthetic ("fake") KV: mark the first `tokens` positions computed without a
    /// forward pass; their blocks hold synthetic content (dynamo_fpm.md §1.10).
    FakeCompute {
        /// The request.
        req: String,
        /// Tokens.
        tokens: u64,
    },
    /// Register a request's full blocks in the prefix cache (`cache_blocks`).
    CacheBlocks {
        /// The request.
        req: String,
        /// Tokens to register.
        num_tokens: u64,
    },
    /// Retire through `finish_requests`; fenced frees wait for the step's outputs.
    Finish {
        /// The request.
        req: String,
        /// Through the deferred-free fence.
        #[serde(default)]
        fenced: bool,
    },
    /// Preempt a running request (its blocks are freed; it may come back).
    Preempt {
        /// The request.
        req: String,
    },
    /// Shed a request for good (e.g. a chain at a soft timeout): it is finished
    /// and must never be admitted again.
    Shed {
        /// The request.
        req: String,
        /// Through the deferred-free fence.
        #[serde(default)]
        fenced: bool,
    },
    /// Register a shadow of `chain` at `ctx` with `headroom` private tail tokens.
    RegisterShadow {
        /// The shadow's name.
        shadow: String,
        /// The chain it borrows.
        chain: String,
        /// The context it is cut at.
        ctx: u64,
        /// Steady writes it reserves.
        headroom: u64,
        /// How its tail gets content.
        tail: TailMode,
        /// Per-group blocks as registered; empty when registration failed.
        groups: Vec<ShadowGroup>,
        /// The planner reported success.
        ok: bool,
        /// The point was planned as covered (its tail blocks were reserved).
        #[serde(default)]
        covered: bool,
        /// Random-KDA (dynamo_fpm.md §3, §8.1 invariant 49): Mamba/KDA groups get
        /// private state blocks over `recurrent_shadow_range` (null placeholders
        /// below, nothing shared) filled with deterministic random state.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        random_state: bool,
    },
    /// Release copy-on-write retentions taken by shadow registration.
    ReleaseCow,
    /// Zero blocks of one group.
    ZeroBlocks {
        /// The cache group.
        group: u32,
        /// Blocks.
        blocks: Vec<u32>,
    },
    /// Copy one block's content (copy-on-write).
    CopyBlock {
        /// The cache group.
        group: u32,
        /// Source block.
        src: u32,
        /// Destination block.
        dst: u32,
    },
    /// `reset_prefix_cache`, with the result the planner saw.
    ResetPrefixCache {
        /// What the planner saw returned.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<bool>,
    },
    /// Start of a timed measurement window for a benchmark point.
    BeginTimed {
        /// The point.
        point: u64,
    },
    /// End of the timed window.
    EndTimed {
        /// The point.
        point: u64,
    },
    /// This rank injects benchmark point `point` in this step; `replica`: an
    /// eager warm-up replica (dynamo_fpm.md §1.6), run and discarded.
    InjectPoint {
        /// The point.
        point: u64,
        /// An eager replica.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        replica: bool,
    },
    /// Host-side bookkeeping (e.g. block registration) that costs wall time.
    HostWork {
        /// What.
        label: String,
    },
    /// The sweep is over: every block must be back at ref 0, the cache empty.
    EndSweep,
    /// What the recorded planner's KV-cache manager held at the end of a step
    /// (spec/plan.md §7): the executor must hold exactly the same.
    Observe(Box<super::recorded::Observation>),
    /// The recorded planner failed here: it raised, or its sweep never ended.
    PlannerFailed {
        /// Raised or stalled.
        kind: super::recorded::FailureKind,
        /// The error.
        error: String,
    },
}

fn yes() -> bool {
    true
}

/// A fault the executor injects at a chosen step (spec/plan.md §4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "fault", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultSpec {
    /// The soft deadline passes at this step.
    SoftTimeout {
        /// The step.
        step: u64,
    },
    /// A request is aborted (finish_requests ABORTED) at the start of the step.
    Abort {
        /// The step.
        step: u64,
        /// The rank.
        #[serde(default)]
        rank: u32,
        /// The request.
        req: String,
        /// Its step is in flight under `defer_block_free`: the free waits behind
        /// the fence, as a fenced `finish` does.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        fenced: bool,
    },
    /// `blocks` free blocks of the rank become unusable (a smaller pool than
    /// negotiated); with `steps` = k they come back k steps later (blocks held
    /// for a while by something outside the planner).
    ShrinkPool {
        /// The step.
        step: u64,
        /// The rank.
        #[serde(default)]
        rank: u32,
        /// Blocks left usable.
        blocks: u32,
        /// For how many steps (for good when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        steps: Option<u64>,
    },
    /// Outputs of forwards in this step land `by` steps late (async placeholders).
    DelayOutputs {
        /// The step.
        step: u64,
        /// The rank.
        #[serde(default)]
        rank: u32,
        /// Steps late.
        by: u64,
    },
    /// The rank's next shadow registration at or after `step` fails locally; with
    /// `after` = n, the (n + 1)-th one (n registrations succeed first).
    StageFailure {
        /// The step.
        step: u64,
        /// The rank.
        rank: u32,
        /// Registrations that succeed first.
        #[serde(default, skip_serializing_if = "crate::serde_skip::is_zero")]
        after: u32,
    },
    /// Messages from `rank` (its point injections) reach the other ranks `steps` steps late.
    MessageLag {
        /// The rank.
        rank: u32,
        /// Steps late.
        steps: u64,
    },
}

impl Plan {
    /// A plan of `scenario` with no steps.
    pub fn new(scenario: Scenario) -> Self {
        Plan {
            format: super::PLAN_FORMAT.into(),
            scenario,
            faults: Vec::new(),
            steps: Vec::new(),
            benchmark: None,
            source: None,
        }
    }
}

/// Tokens the forwards among `ops` compute (the nominal clock's input).
pub fn forward_tokens(ops: &[PlanOp]) -> u64 {
    ops.iter()
        .map(|op| match op {
            PlanOp::Forward { batch } => batch.iter().map(|b| b.tokens).sum(),
            _ => 0,
        })
        .sum()
}
