//! What a planner team outside kvsim keeps in its own crate: its model as a kvsim scenario
//! (a scenario file, as `kvsim scenarios --show NAME` prints one), and the plans its own
//! planner writes. Its `tests/` are property suites over both, with kvsim as the library.

use kvsim_sim::api::{self, prefill_ops, tiny_scenario, BuiltinScenario, Plan, PlanBuilder, PlanError};
use serde_json::json;

/// Our model, as a scenario file (checked in beside the code).
pub const ACME_SCENARIO: &str = include_str!("../scenarios/acme-moe.json");

/// Our model as a kvsim scenario. The file is ours and is valid; a typo in it is a test
/// failure naming the JSON path (`kvsim_sim::api::ScenarioFileError`).
pub fn acme() -> BuiltinScenario {
    api::load_scenario(ACME_SCENARIO).unwrap_or_else(|e| panic!("scenarios/acme-moe.json: {e}"))
}

/// "Our planner": warms a request of `ctx` tokens, then decodes `decodes` tokens, on kvsim's
/// tiny full + sliding-window layout. With `zero_window_block`, it also zeroes the window's
/// last block before the first decode reads it (the kind of slip a warm-up planner makes).
pub fn our_plan(ctx: u64, decodes: u64, zero_window_block: bool) -> Result<Plan, PlanError> {
    let mut b = PlanBuilder::new(tiny_scenario(Some(4), 1, 64)).step(0, 0, prefill_ops("warm", ctx));
    for d in 0..decodes {
        let mut ops = vec![json!({"op": "schedule", "req": "warm", "num_new_tokens": 1})];
        if zero_window_block && d == 0 {
            // The request's window block: block ids are handed out from the free queue's
            // head, so the window group's last block is the prefill's last one in group 1.
            let last = 2 * ctx.div_ceil(4);
            ops.push(json!({"op": "zero_blocks", "group": 1, "blocks": [last]}));
        }
        ops.push(json!({"op": "forward", "batch": [{"req": "warm", "tokens": 1, "output": [5]}]}));
        ops.push(json!({"op": "process_outputs"}));
        b = b.step(1 + d, 0, ops);
    }
    b.step(1 + decodes, 0, vec![json!({"op": "finish", "req": "warm"})])
        .build()
}
