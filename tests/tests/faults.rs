//! Each fault the executor injects has a visible effect: the same plan that
//! passes without it fails (or changes) with it.

use kvsim_core::plan::load_plan;
use kvsim_sim::exec::{run_plan, Outcome};
use kvsim_tests::{plan, prefill, scenario};
use serde_json::{json, Value};

fn run(p: &Value) -> Outcome {
    run_plan(&load_plan(&p.to_string()).unwrap_or_else(|e| panic!("{e}"))).outcome
}

fn with_faults(mut p: Value, faults: Value) -> Value {
    p["faults"] = faults;
    p
}

fn invariant(o: &Outcome) -> Option<&str> {
    match o {
        Outcome::Violation(f) => f.invariant.as_deref(),
        _ => None,
    }
}

#[test]
fn soft_timeout_forbids_new_points() {
    let p = plan(
        scenario(None, 1, 32),
        vec![
            (0, 0, prefill("a", 4)),
            (1, 0, vec![json!({"op": "inject_point", "point": 1})]),
            (2, 0, vec![json!({"op": "inject_point", "point": 2})]),
        ],
    );
    assert_eq!(run(&p), Outcome::Passed);
    // A rank's first point runs whatever the clock says (Dynamo's boundary
    // check waits for a finished point), a second may not start past it.
    let first = with_faults(p.clone(), json!([{"fault": "soft_timeout", "step": 1}]));
    assert_eq!(invariant(&run(&first)), Some("PL-DEADLINE"));
    let late = with_faults(p.clone(), json!([{"fault": "soft_timeout", "step": 2}]));
    assert_eq!(invariant(&run(&late)), Some("PL-DEADLINE"));
    let after = with_faults(p.clone(), json!([{"fault": "soft_timeout", "step": 3}]));
    assert_eq!(
        run(&after),
        Outcome::Passed,
        "a deadline after the last point changes nothing"
    );
    // An eager warm-up replica is discarded (no result, no skip): the boundary
    // check still has nothing to wait behind, so the first real point runs.
    let mut replica_first = first;
    replica_first["steps"][1]["ops"][0]["replica"] = json!(true);
    assert_eq!(run(&replica_first), Outcome::Passed);
}

#[test]
fn abort_removes_a_request_the_plan_still_uses() {
    let p = plan(
        scenario(None, 1, 32),
        vec![
            (0, 0, prefill("a", 4)),
            (1, 0, vec![json!({"op": "schedule", "req": "a", "num_new_tokens": 1})]),
        ],
    );
    assert_eq!(run(&p), Outcome::Passed);
    let aborted = with_faults(p, json!([{"fault": "abort", "step": 1, "req": "a"}]));
    assert!(matches!(run(&aborted), Outcome::Mismatch(f) if f.detail.contains("not live")));
}

#[test]
fn a_smaller_pool_refuses_an_allocation_the_plan_expected() {
    let p = plan(scenario(None, 1, 12), vec![(0, 0, prefill("a", 16))]);
    assert_eq!(run(&p), Outcome::Passed);
    let shrunk = with_faults(p, json!([{"fault": "shrink_pool", "step": 0, "blocks": 9}]));
    assert_eq!(invariant(&run(&shrunk)), Some("PL-CAPACITY"));
}

#[test]
fn a_transient_shrink_gives_its_blocks_back() {
    // 16 tokens need 4 blocks of the 11 usable; 9 taken at step 0 leave 2.
    let p = plan(scenario(None, 1, 12), vec![(0, 0, vec![]), (2, 0, prefill("a", 16))]);
    let shrunk = |steps: Value| {
        with_faults(
            p.clone(),
            json!([{"fault": "shrink_pool", "step": 0, "blocks": 9, "steps": steps}]),
        )
    };
    assert_eq!(run(&shrunk(json!(2))), Outcome::Passed, "back before step 2's schedule");
    assert_eq!(
        invariant(&run(&shrunk(json!(3)))),
        Some("PL-CAPACITY"),
        "still held at step 2"
    );
    assert_eq!(
        invariant(&run(&shrunk(Value::Null))),
        Some("PL-CAPACITY"),
        "held for good"
    );
}

#[test]
fn delayed_outputs_keep_the_fence_closed() {
    // A fenced free in step 1 is released when step 1's outputs are processed;
    // with outputs delayed, the allocation in step 2 draws while the fence is pending.
    let p = plan(
        scenario(None, 1, 32),
        vec![
            (0, 0, prefill("a", 8)),
            (
                1,
                0,
                vec![
                    json!({"op": "add_request", "req": "b", "prompt": {"source": "ids", "ids": [60, 61, 62, 63, 64]}}),
                    json!({"op": "schedule", "req": "a", "num_new_tokens": 1}),
                    json!({"op": "forward", "batch": [{"req": "a", "tokens": 1, "output": [5]}]}),
                    json!({"op": "finish", "req": "a", "fenced": true}),
                    json!({"op": "process_outputs"}),
                ],
            ),
            (2, 0, vec![json!({"op": "schedule", "req": "b", "num_new_tokens": 5})]),
        ],
    );
    assert_eq!(run(&p), Outcome::Passed);
    let delayed = with_faults(p, json!([{"fault": "delay_outputs", "step": 1, "by": 2}]));
    assert_eq!(invariant(&run(&delayed)), Some("PL-FENCE"));
}

#[test]
fn a_rank_stage_failure_breaks_a_covered_registration() {
    let steps = vec![
        (0, 0, prefill("c", 8)),
        (
            1,
            0,
            vec![
                json!({"op": "register_shadow", "shadow": "s", "chain": "c", "ctx": 8, "headroom": 4, "tail": "zero",
            "groups": [{"shared": [1, 2], "tail": [3]}], "ok": true, "covered": true}),
            ],
        ),
    ];
    let p = plan(scenario(None, 1, 32), steps);
    assert_eq!(run(&p), Outcome::Passed);
    let failing = with_faults(p, json!([{"fault": "stage_failure", "step": 1, "rank": 0}]));
    assert_eq!(invariant(&run(&failing)), Some("PL-COVERAGE"));
}

#[test]
fn an_abort_on_an_injected_registration_failure_is_judged_by_what_it_left() {
    // The real planner passes an injected failure on (`planner_failed {kind:
    // fault}`) after its abort path cleaned up: clean, that is the design.
    let steps_of = |cleanup: Vec<Value>, covered: bool| {
        let mut fail = vec![
            json!({"op": "register_shadow", "shadow": "s", "chain": "c", "ctx": 8, "headroom": 4,
            "tail": "zero", "groups": [], "ok": false, "covered": covered}),
        ];
        fail.extend(cleanup);
        fail.push(json!({"op": "planner_failed", "kind": "fault", "error": "ValueError: (kvsim stage_failure fault)"}));
        vec![(0, 0, prefill("c", 8)), (1, 0, fail)]
    };
    let steps = |cleanup| steps_of(cleanup, true);
    let clean = vec![
        json!({"op": "finish", "req": "c"}),
        json!({"op": "reset_prefix_cache", "expect": true}),
    ];
    let faulted = |s| {
        with_faults(
            plan(scenario(None, 1, 32), s),
            json!([{"fault": "stage_failure", "step": 1, "rank": 0}]),
        )
    };
    assert_eq!(run(&faulted(steps(clean))), Outcome::Passed);
    // An abort that leaves the chain's blocks behind is not clean.
    assert_eq!(invariant(&run(&faulted(steps(vec![])))), Some("PL-CLEAN-END"));
    // An injected failure no fault caused is not what the planner did.
    let unfaulted = plan(scenario(None, 1, 32), steps_of(vec![], false));
    assert!(matches!(run(&unfaulted), Outcome::Mismatch(_)), "{:?}", run(&unfaulted));
}

#[test]
fn message_lag_splits_the_ranks() {
    let p = plan(
        scenario(None, 2, 32),
        vec![
            (0, 0, vec![json!({"op": "inject_point", "point": 1})]),
            (0, 1, vec![json!({"op": "inject_point", "point": 1})]),
        ],
    );
    assert_eq!(run(&p), Outcome::Passed);
    let lagging = with_faults(p, json!([{"fault": "message_lag", "rank": 1, "steps": 1}]));
    // The blocking stage exchange (PR #14728) waits for the slowest rank's message:
    // both ranks act on the point one step late, together.
    assert_eq!(run(&lagging), Outcome::Passed);
    // The non-blocking exchange (§8.2 bug 22) lets rank 0 act at once.
    let plan = kvsim_core::plan::load_plan(&lagging.to_string()).unwrap();
    let opts = kvsim_sim::exec::RunOptions::quiet(Some("nonblocking-stage-exchange".parse().unwrap()));
    let r = kvsim_sim::exec::run_plan_opts(&plan, opts, &mut |_, _| {});
    assert_eq!(invariant(&r.outcome), Some("PL-DP-LOCKSTEP"));
}
