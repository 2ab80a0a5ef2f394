//! What a simulator run produced: the outcome, the op trace, and a summary.

use std::collections::BTreeMap;

use kvsim_core::engine::Engine;
use kvsim_core::plan::PlanOp;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{json, Value};

/// Where and what: a violation or a plan/model mismatch.
#[derive(Clone, Debug, Serialize, PartialEq, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Finding {
    /// The invariant's ID (a violation's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invariant: Option<String>,
    /// The plan step.
    pub step: u64,
    /// The rank.
    pub rank: u32,
    /// The op's index in the rank's step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub op_index: Option<usize>,
    /// The op as the plan has it; null when the finding is not at an op (a step's end, the
    /// benchmark record).
    #[schemars(with = "Option<PlanOp>")]
    pub op: Value,
    /// What broke.
    pub detail: String,
    /// A state excerpt.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    #[schemars(with = "StateExcerpt")]
    pub state: Value,
}

impl Finding {
    /// A finding at `step`, `rank`, op `op_index`.
    pub fn at(step: u64, rank: u32, op_index: Option<usize>, op: Value, detail: String) -> Self {
        Finding {
            invariant: None,
            step,
            rank,
            op_index,
            op,
            detail,
            state: Value::Null,
        }
    }
    /// With the invariant's ID.
    pub fn with_invariant(mut self, id: &str) -> Self {
        self.invariant = Some(id.to_string());
        self
    }
    /// With a state excerpt.
    pub fn with_state(mut self, state: Value) -> Self {
        self.state = state;
        self
    }
    /// Where, for a person: `step 3 rank 0 op 5`, or `step 3 rank 0 (not at one op)` for a
    /// finding about a whole step or the benchmark record.
    pub fn location(&self) -> String {
        match self.op_index {
            Some(i) => format!("step {} rank {} op {i}", self.step, self.rank),
            None => format!("step {} rank {} (not at one op)", self.step, self.rank),
        }
    }
}

/// How a run ended.
#[derive(Clone, Debug, Serialize, PartialEq, JsonSchema)]
#[serde(tag = "result", rename_all = "snake_case")]
#[schemars(deny_unknown_fields)]
pub enum Outcome {
    /// Every invariant held.
    Passed,
    /// An invariant broke.
    Violation(Finding),
    /// The plan disagrees with the model: it cannot have come from this scenario.
    Mismatch(Finding),
}

/// One line of the JSON-lines op trace.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TraceEvent {
    /// Virtual time (ns).
    pub t_ns: u64,
    /// The step.
    pub step: u64,
    /// The rank.
    pub rank: u32,
    /// The op's index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub i: Option<usize>,
    /// The op.
    #[serde(skip_serializing_if = "Value::is_null")]
    pub op: Value,
    /// What the model answered.
    pub result: String,
}

impl TraceEvent {
    /// An op's line.
    pub fn op(t_ns: u64, step: u64, rank: u32, i: usize, op: &Value, result: String) -> Self {
        TraceEvent {
            t_ns,
            step,
            rank,
            i: Some(i),
            op: op.clone(),
            result,
        }
    }
    /// A fault's line.
    pub fn fault(t_ns: u64, step: u64, rank: u32, what: String) -> Self {
        TraceEvent {
            t_ns,
            step,
            rank,
            i: None,
            op: Value::Null,
            result: format!("fault: {what}"),
        }
    }
}

/// What a simulator run produced.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The plan's digest.
    pub plan_hash: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Steps run.
    pub steps: u64,
    /// Ops run.
    pub ops: u64,
    /// Simulated time (ns).
    pub sim_time_ns: u64,
    /// The last step run.
    pub last_step: u64,
    /// The op trace (when kept).
    pub trace: Vec<TraceEvent>,
    /// Rare events reached (coverage goals), by name; not part of the result file.
    pub events: BTreeMap<String, u64>,
}

impl RunReport {
    /// An empty report of the plan with this digest.
    pub fn new(plan_hash: String) -> Self {
        RunReport {
            plan_hash,
            outcome: Outcome::Passed,
            steps: 0,
            ops: 0,
            sim_time_ns: 0,
            last_step: 0,
            trace: Vec::new(),
            events: BTreeMap::new(),
        }
    }

    /// Stop the clock at `clock`, the run at `step`.
    pub fn finish(&mut self, clock: u64, step: u64) {
        self.sim_time_ns = clock;
        self.last_step = step;
    }

    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Passed
    }

    /// The result file of `kvsim replay --backend sim` (keys sorted, as a `Value`).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(SimResult {
            format: "kvsim-replay/1".into(),
            backend: "sim".into(),
            plan_hash: self.plan_hash.clone(),
            outcome: self.outcome.clone(),
            steps: self.steps,
            ops: self.ops,
            sim_time_ns: self.sim_time_ns,
            time_model: "nominal (1 ms + 20 ns/token per step) until the cost model lands".into(),
        })
        .expect("results serialize")
    }

    /// The JSON-lines op trace (deterministic bytes).
    pub fn trace_jsonl(&self) -> String {
        let mut s = String::new();
        for e in &self.trace {
            s.push_str(&serde_json::to_string(e).expect("trace events serialize"));
            s.push('\n');
        }
        s
    }
}

/// `kvsim replay --out` on the simulator (`kvsim schema replay`).
#[derive(Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SimResult {
    /// `kvsim-replay/1`.
    pub format: String,
    /// `sim`.
    pub backend: String,
    /// The plan's digest.
    pub plan_hash: String,
    /// How the run ended.
    pub outcome: Outcome,
    /// Steps run.
    pub steps: u64,
    /// Ops applied.
    pub ops: u64,
    /// Simulated time.
    pub sim_time_ns: u64,
    /// The clock that gave it.
    pub time_model: String,
}

/// The shape of [`state_excerpt`] (schema only).
#[allow(dead_code)]
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct StateExcerpt {
    free_blocks: u64,
    cached_keys: u64,
    fenced_frees_pending: u64,
    cow_retained: Vec<u32>,
    timed_point: Option<u64>,
    /// The first 16 live requests.
    live_requests: Vec<LiveRequest>,
}

#[allow(dead_code)]
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
struct LiveRequest {
    req: String,
    computed: u64,
    tokens: u64,
    /// Block ids per group.
    tables: Vec<Vec<u32>>,
}

/// The part of an engine's state a violation report shows.
pub fn state_excerpt(e: &Engine) -> Value {
    let live: Vec<Value> = e
        .requests
        .iter()
        .map(|(id, r)| json!({"req": id, "computed": r.req.num_computed_tokens, "tokens": r.req.num_tokens(), "tables": e.kv.get_block_ids(r.req.id)}))
        .take(16)
        .collect();
    json!({
        "free_blocks": e.kv.pool.num_free_blocks(),
        "cached_keys": e.kv.pool.num_cached_keys(),
        "fenced_frees_pending": e.deferred.len(),
        "cow_retained": e.cow_retained,
        "timed_point": e.timed,
        "live_requests": live,
    })
}
