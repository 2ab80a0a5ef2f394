//! Writing plans by hand, as a planner's test does: a tiny scenario, ops as JSON
//! (`spec/plan.md` §3 is their format), and a builder that validates the plan it makes.

use serde_json::{json, Value};

use kvsim_core::plan::{load_plan, Plan, PlanError};

/// A tiny scenario as plan JSON: full attention (and a sliding window of `swa_window` tokens
/// when given), block size 4, 8 slots, 64 batched tokens, 64-token model length.
pub fn tiny_scenario(swa_window: Option<u64>, dp_ranks: u32, pool_blocks: u32) -> Value {
    let mut groups =
        vec![json!({"kind": "full_attention", "block_size": 4, "layers": 2, "kv_heads": 2, "head_dim": 8})];
    if let Some(w) = swa_window {
        groups.push(json!({"kind": "sliding_window", "sliding_window": w, "block_size": 4, "layers": 2, "kv_heads": 2, "head_dim": 8}));
    }
    json!({
        "name": "tiny",
        "model": {"groups": groups, "vocab_size": 100},
        "pool_blocks": pool_blocks,
        "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 64, "max_model_len": 64, "enable_caching": true},
        "dp_ranks": dp_ranks,
        "seed": 1
    })
}

/// Prompt tokens given by id (`{"source": "ids", ...}`).
pub fn token_ids(ids: &[u64]) -> Value {
    json!({"source": "ids", "ids": ids})
}

/// The ops of one whole prefill: add request `req` with a `len`-token prompt derived from its
/// name, schedule it whole, run the forward pass with one sampled token (7), process outputs.
pub fn prefill_ops(req: &str, len: u64) -> Vec<Value> {
    let offset: u64 = req.bytes().map(u64::from).sum();
    let prompt: Vec<u64> = (0..len).map(|t| (t + offset) % 100).collect();
    vec![
        json!({"op": "add_request", "req": req, "prompt": token_ids(&prompt)}),
        json!({"op": "schedule", "req": req, "num_new_tokens": len}),
        json!({"op": "forward", "batch": [{"req": req, "tokens": len, "output": [7]}]}),
        json!({"op": "process_outputs"}),
    ]
}

/// A plan assembled step by step from JSON ops, validated as `kvsim replay` validates it.
///
/// ```
/// use kvsim_sim::api::{self, prefill_ops, tiny_scenario, PlanBuilder};
/// use serde_json::json;
///
/// let plan = PlanBuilder::new(tiny_scenario(None, 1, 32))
///     .step(0, 0, prefill_ops("a", 12))
///     .step(1, 0, vec![json!({"op": "finish", "req": "a"})])
///     .build()?;
/// api::run(&plan).expect_passed()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct PlanBuilder {
    scenario: Value,
    faults: Vec<Value>,
    steps: Vec<Value>,
}

impl PlanBuilder {
    /// A plan of `scenario` (plan JSON, e.g. [`tiny_scenario`]) with no steps yet.
    pub fn new(scenario: Value) -> Self {
        PlanBuilder {
            scenario,
            faults: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// Adds scheduler step `step` of `rank` with its ops, in order.
    pub fn step(mut self, step: u64, rank: u32, ops: Vec<Value>) -> Self {
        self.steps.push(json!({"step": step, "rank": rank, "ops": ops}));
        self
    }

    /// Adds a fault the executor injects (`spec/plan.md` §4).
    pub fn fault(mut self, fault: Value) -> Self {
        self.faults.push(fault);
        self
    }

    /// The plan as JSON (what a planner would write to a file).
    pub fn to_json(&self) -> Value {
        let mut plan = json!({"format": "kvsim-plan/1", "scenario": self.scenario, "steps": self.steps});
        if !self.faults.is_empty() {
            plan["faults"] = Value::Array(self.faults.clone());
        }
        plan
    }

    /// The plan, parsed and validated; the error names the JSON path at fault.
    pub fn build(&self) -> Result<Plan, PlanError> {
        load_plan(&self.to_json().to_string())
    }
}
