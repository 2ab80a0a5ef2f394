//! Shared helpers for kvsim integration tests: small hand-made plans. The builders are
//! kvsim's library API (`kvsim_sim::api`); these names are the tests' shorthand.

pub mod schema;

use serde_json::Value;

pub use kvsim_sim::api::{prefill_ops as prefill, tiny_scenario as scenario, token_ids as ids};

/// A plan from a scenario and `[step, rank, [ops...]]` triples.
pub fn plan(scenario: Value, steps: Vec<(u64, u32, Vec<Value>)>) -> Value {
    steps
        .into_iter()
        .fold(kvsim_sim::api::PlanBuilder::new(scenario), |b, (s, r, ops)| {
            b.step(s, r, ops)
        })
        .to_json()
}
