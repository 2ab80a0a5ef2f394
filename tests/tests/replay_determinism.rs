//! Same plan ⇒ same bytes: the result file and the op trace of a replay are
//! byte-identical across runs and across thread counts.

use kvsim_core::plan::load_plan;
use kvsim_sim::exec::{perfetto_json, run_plan};
use kvsim_tests::{plan, prefill, scenario};
use serde_json::{json, Value};

fn sample_plans() -> Vec<Value> {
    let mut plans = Vec::new();
    for n in 1..=12u64 {
        let mut steps = vec![(0, 0, prefill("a", 4 + n)), (1, 0, prefill("b", 3 + 2 * n))];
        steps.push((2, 0, vec![
            json!({"op": "schedule", "req": "a", "num_new_tokens": 1}),
            json!({"op": "schedule", "req": "b", "num_new_tokens": 1}),
            json!({"op": "begin_timed", "point": n}),
            json!({"op": "forward", "batch": [{"req": "a", "tokens": 1, "output": [3]}, {"req": "b", "tokens": 1, "output": [4]}]}),
            json!({"op": "end_timed", "point": n}),
            json!({"op": "process_outputs"}),
            json!({"op": "finish", "req": "a", "fenced": true}),
            json!({"op": "finish", "req": "b", "fenced": true}),
        ]));
        steps.push((
            3,
            0,
            vec![
                json!({"op": "process_outputs"}),
                json!({"op": "reset_prefix_cache", "expect": true}),
                json!({"op": "end_sweep"}),
            ],
        ));
        plans.push(plan(scenario(Some(4 + n % 3), 1, 40), steps));
    }
    plans
}

fn replay_bytes(p: &Value) -> (String, String, String) {
    let plan = load_plan(&p.to_string()).unwrap();
    let r = run_plan(&plan);
    assert!(r.passed(), "{:?}", r.outcome);
    (r.to_json().to_string(), r.trace_jsonl(), perfetto_json(&r).to_string())
}

#[test]
fn replays_are_byte_identical_across_runs_and_thread_counts() {
    let plans = sample_plans();
    let sequential: Vec<_> = plans.iter().map(replay_bytes).collect();
    assert_eq!(sequential, plans.iter().map(replay_bytes).collect::<Vec<_>>());
    for threads in [2usize, 4, 8] {
        let chunk = plans.len().div_ceil(threads);
        let parallel: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = plans
                .chunks(chunk)
                .map(|c| s.spawn(move || c.iter().map(replay_bytes).collect::<Vec<_>>()))
                .collect();
            handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(parallel, sequential, "{threads} threads");
    }
}

#[test]
fn different_plans_give_different_hashes() {
    let hashes: std::collections::BTreeSet<String> = sample_plans()
        .iter()
        .map(|p| run_plan(&load_plan(&p.to_string()).unwrap()).plan_hash)
        .collect();
    assert_eq!(hashes.len(), 12);
}
