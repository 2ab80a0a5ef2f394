//! Malformed or inconsistent plans get a typed error naming the JSON path.

use kvsim_core::plan::{load_plan, PlanError};
use kvsim_tests::{plan, prefill, scenario};
use serde_json::json;

fn err(p: &str) -> PlanError {
    load_plan(p).expect_err("the plan must be refused")
}

#[test]
fn unknown_fields_are_malformed_with_their_path() {
    let mut p = plan(scenario(None, 1, 32), vec![(0, 0, prefill("a", 4))]);
    p["steps"][0]["ops"][1]["num_new_tokenz"] = json!(3);
    let e = err(&p.to_string());
    assert!(matches!(e, PlanError::Malformed { .. }), "{e}");
    assert_eq!(e.path(), "$.steps[0].ops[1]", "{e}");
    assert!(e.to_string().contains("num_new_tokenz"), "{e}");
    let mut p = plan(scenario(None, 1, 32), vec![]);
    p["scenario"]["pool_blokcs"] = json!(3);
    assert!(err(&p.to_string()).to_string().contains("pool_blokcs"));
}

#[test]
fn negative_sizes_and_wrong_types_are_malformed() {
    let mut p = plan(scenario(None, 1, 32), vec![]);
    p["scenario"]["pool_blocks"] = json!(-5);
    assert_eq!(err(&p.to_string()).path(), "$.scenario.pool_blocks");
    assert!(matches!(err("{not json"), PlanError::Malformed { .. }));
    assert!(matches!(err("[]"), PlanError::Malformed { .. }));
}

#[test]
fn a_block_table_naming_a_block_the_pool_lacks() {
    let p = plan(
        scenario(None, 1, 32),
        vec![(0, 0, vec![json!({"op": "zero_blocks", "group": 0, "blocks": [3, 99]})])],
    );
    let e = err(&p.to_string());
    assert!(matches!(e, PlanError::Inconsistent { .. }));
    assert_eq!(e.path(), "$.steps[0].ops[0].blocks");
    assert!(e.to_string().contains("block 99 does not exist"), "{e}");
}

#[test]
fn a_step_for_a_finished_request() {
    let p = plan(
        scenario(None, 1, 32),
        vec![
            (0, 0, prefill("a", 4)),
            (
                1,
                0,
                vec![
                    json!({"op": "finish", "req": "a"}),
                    json!({"op": "schedule", "req": "a", "num_new_tokens": 1}),
                ],
            ),
        ],
    );
    let e = err(&p.to_string());
    assert_eq!(e.path(), "$.steps[1].ops[1].req", "{e}");
    assert!(e.to_string().contains("already finished"), "{e}");
}

#[test]
fn impossible_layouts_and_ranks() {
    let mut p = plan(scenario(Some(4), 1, 32), vec![]);
    p["scenario"]["model"]["groups"][1]["sliding_window"] = json!(1);
    assert_eq!(err(&p.to_string()).path(), "$.scenario");
    let p = plan(scenario(None, 1, 32), vec![(0, 3, vec![])]);
    assert_eq!(err(&p.to_string()).path(), "$.steps[0].rank");
    let mut p = plan(scenario(None, 1, 32), vec![]);
    p["format"] = json!("kvsim-plan/9");
    assert_eq!(err(&p.to_string()).path(), "$.format");
}
