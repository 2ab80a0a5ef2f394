//! Every planner invariant of spec/invariants.md is tripped by a hand-made bad
//! plan, and the fixed plan passes.

use kvsim_core::plan::load_plan;
use kvsim_sim::exec::{run_plan, Outcome};
use kvsim_tests::{plan, prefill, scenario};
use serde_json::{json, Value};

fn outcome(p: &Value) -> Outcome {
    let plan = load_plan(&p.to_string()).unwrap_or_else(|e| panic!("{e}"));
    run_plan(&plan).outcome
}

fn assert_passes(p: &Value) {
    match outcome(p) {
        Outcome::Passed => {}
        other => panic!("expected a pass, got {other:?}"),
    }
}

fn assert_trips(p: &Value, id: &str) {
    match outcome(p) {
        Outcome::Violation(f) => assert_eq!(f.invariant.as_deref(), Some(id), "{f:?}"),
        other => panic!("expected {id}, got {other:?}"),
    }
}

/// Chain `c` (8 tokens, one output) on full + sliding window(4), then a shadow at ctx 8.
fn shadow_steps(groups: Value, ok: bool, covered: bool) -> Vec<(u64, u32, Vec<Value>)> {
    vec![
        (0, 0, prefill("c", 8)),
        (
            1,
            0,
            vec![
                json!({"op": "register_shadow", "shadow": "s", "chain": "c", "ctx": 8, "headroom": 4,
                          "tail": "zero", "groups": groups, "ok": ok, "covered": covered}),
            ],
        ),
    ]
}

fn both_groups() -> Value {
    json!([{"shared": [1, 2], "tail": [5]}, {"shared": [3, 4], "tail": [6]}])
}

#[test]
fn pl_window_sliding_window_read_after_its_block_was_overwritten() {
    let decode = |extra: Vec<Value>| {
        let mut ops = vec![json!({"op": "schedule", "req": "a", "num_new_tokens": 1})];
        ops.extend(extra);
        ops.push(json!({"op": "forward", "batch": [{"req": "a", "tokens": 1, "output": [9]}]}));
        ops
    };
    let good = plan(
        scenario(Some(4), 1, 32),
        vec![(0, 0, prefill("a", 12)), (1, 0, decode(vec![]))],
    );
    assert_passes(&good);
    // The window block (index 2, positions 8..11) is zeroed before the decode reads it.
    let bad = plan(
        scenario(Some(4), 1, 32),
        vec![
            (0, 0, prefill("a", 12)),
            (
                1,
                0,
                decode(vec![json!({"op": "zero_blocks", "group": 1, "blocks": [6]})]),
            ),
        ],
    );
    assert_trips(&bad, "PL-WINDOW");
}

#[test]
fn pl_shadow_atomic_registration_in_only_some_groups() {
    let mut good = shadow_steps(both_groups(), true, true);
    good.push((
        2,
        0,
        vec![json!({"op": "forward", "batch": [{"req": "s", "tokens": 1}]})],
    ));
    assert_passes(&plan(scenario(Some(4), 1, 32), good));
    let bad = shadow_steps(json!([{"shared": [1, 2], "tail": [5]}]), true, true);
    assert_trips(&plan(scenario(Some(4), 1, 32), bad), "PL-SHADOW-ATOMIC");
    // A failed registration that still drew blocks also breaks atomicity.
    let leaky = shadow_steps(json!([{"shared": [1, 2], "tail": [5]}]), false, false);
    assert_trips(&plan(scenario(Some(4), 1, 32), leaky), "PL-SHADOW-ATOMIC");
}

#[test]
fn pl_coverage_a_covered_point_whose_registration_fails() {
    assert_passes(&plan(scenario(Some(4), 1, 32), shadow_steps(json!([]), false, false)));
    assert_trips(
        &plan(scenario(Some(4), 1, 32), shadow_steps(json!([]), false, true)),
        "PL-COVERAGE",
    );
}

#[test]
fn pl_shadow_parked_shadow_reads_a_chain_still_extending() {
    let mut good = shadow_steps(both_groups(), true, true);
    good.push((
        2,
        0,
        vec![json!({"op": "forward", "batch": [{"req": "s", "tokens": 1}]})],
    ));
    assert_passes(&plan(scenario(Some(4), 1, 32), good));
    let mut bad = shadow_steps(both_groups(), true, true);
    bad.push((
        2,
        0,
        vec![
            json!({"op": "schedule", "req": "c", "num_new_tokens": 1}),
            json!({"op": "forward", "batch": [{"req": "c", "tokens": 1}, {"req": "s", "tokens": 1}]}),
        ],
    ));
    assert_trips(&plan(scenario(Some(4), 1, 32), bad), "PL-SHADOW-PARKED");
}

#[test]
fn pl_fence_pool_draw_and_reset_while_fenced_frees_are_pending() {
    let steps = |drain: bool, then: Value| {
        let mut ops = vec![json!({"op": "finish", "req": "a", "fenced": true})];
        if drain {
            ops.push(json!({"op": "process_outputs"}));
        }
        ops.push(then);
        vec![
            (0, 0, prefill("a", 8)),
            (
                1,
                0,
                vec![
                    json!({"op": "add_request", "req": "b", "prompt": {"source": "ids", "ids": [50, 51, 52, 53, 54]}}),
                ],
            ),
            (2, 0, ops),
        ]
    };
    let draw = json!({"op": "schedule", "req": "b", "num_new_tokens": 5});
    let reset = json!({"op": "reset_prefix_cache", "expect": true});
    assert_passes(&plan(scenario(None, 1, 32), steps(true, draw.clone())));
    assert_trips(&plan(scenario(None, 1, 32), steps(false, draw)), "PL-FENCE");
    assert_passes(&plan(scenario(None, 1, 32), steps(true, reset)));
    assert_trips(
        &plan(scenario(None, 1, 32), steps(false, json!({"op": "reset_prefix_cache"}))),
        "PL-FENCE",
    );
}

#[test]
fn pl_no_readmit_a_shed_chain_comes_back() {
    let steps = |id: &str| {
        vec![
            (0, 0, prefill("c", 8)),
            (
                1,
                0,
                vec![
                    json!({"op": "shed", "req": "c"}),
                    json!({"op": "add_request", "req": id, "prompt": {"source": "ids", "ids": [1, 2, 3]}}),
                ],
            ),
        ]
    };
    assert_passes(&plan(scenario(None, 1, 32), steps("c2")));
    assert_trips(&plan(scenario(None, 1, 32), steps("c")), "PL-NO-READMIT");
}

#[test]
fn pl_clean_end_blocks_still_referenced_after_the_sweep() {
    let end = |finish: bool| {
        let mut ops = vec![];
        if finish {
            ops.push(json!({"op": "finish", "req": "a"}));
            ops.push(json!({"op": "reset_prefix_cache", "expect": true}));
        }
        ops.push(json!({"op": "end_sweep"}));
        plan(scenario(None, 1, 32), vec![(0, 0, prefill("a", 8)), (1, 0, ops)])
    };
    assert_passes(&end(true));
    assert_trips(&end(false), "PL-CLEAN-END");
}

#[test]
fn pl_dp_lockstep_ranks_inject_different_points() {
    let steps = |p1: u64| {
        vec![
            (0, 0, vec![json!({"op": "inject_point", "point": 1})]),
            (0, 1, vec![json!({"op": "inject_point", "point": p1})]),
        ]
    };
    assert_passes(&plan(scenario(None, 2, 32), steps(1)));
    assert_trips(&plan(scenario(None, 2, 32), steps(2)), "PL-DP-LOCKSTEP");
    // A rank that does not inject at all in that step also breaks lock-step.
    let silent = vec![(0, 0, vec![json!({"op": "inject_point", "point": 1})])];
    assert_trips(&plan(scenario(None, 2, 32), silent), "PL-DP-LOCKSTEP");
}

#[test]
fn pl_timed_host_registration_booked_inside_the_timed_window() {
    let steps = |inside: bool| {
        let cache = json!({"op": "cache_blocks", "req": "a", "num_tokens": 8});
        let mut ops = vec![];
        if !inside {
            ops.push(cache.clone());
        }
        ops.push(json!({"op": "begin_timed", "point": 1}));
        if inside {
            ops.push(cache);
        }
        ops.push(json!({"op": "schedule", "req": "a", "num_new_tokens": 1}));
        ops.push(json!({"op": "forward", "batch": [{"req": "a", "tokens": 1}]}));
        ops.push(json!({"op": "end_timed", "point": 1}));
        vec![(0, 0, prefill("a", 8)), (1, 0, ops)]
    };
    assert_passes(&plan(scenario(None, 1, 32), steps(false)));
    assert_trips(&plan(scenario(None, 1, 32), steps(true)), "PL-TIMED-HOST");
}

#[test]
fn every_catalog_entry_is_covered_by_a_test_here_or_by_a_model_mutant() {
    use kvsim_core::invariants::catalog::CATALOG;
    use kvsim_core::kv::ModelMutant;
    let here = include_str!("invariant_plans.rs");
    for inv in CATALOG {
        // Model mutants, seed-bug mutants and slips (tests/tests/check_suites.rs kills each
        // with its invariant).
        let by_mutant = ModelMutant::ALL.iter().any(|m| m.breaks() == inv.id)
            || kvsim_core::bugs::BUGS.iter().any(|b| b.invariant == inv.id)
            || kvsim_core::slips::SlipMutant::ALL
                .iter()
                .any(|s| s.invariant() == inv.id);
        // An `assert_trips(.., "ID")` call, however rustfmt wraps it.
        let compact: String = here.split_whitespace().collect();
        let by_plan = compact.contains(&format!("\"{}\")", inv.id)) || compact.contains(&format!("\"{}\",)", inv.id));
        assert!(by_mutant || by_plan, "{} has no failing example", inv.id);
    }
}

fn spec_invariants_md() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../spec/invariants.md")).unwrap()
}

#[test]
fn spec_invariants_md_matches_the_catalog() {
    let md = spec_invariants_md();
    let table = kvsim_core::invariants::catalog::render_markdown();
    assert!(
        md.starts_with(&table),
        "the catalog table differs: regenerate it with `kvsim invariants --markdown` (keep the §8.1 section after it)"
    );
}

/// The §8.1 mapping is whole: rows 1..55 once each, a known status on each, the counts line
/// right, and every catalog-style ID it names (PL-, KV-, DY-) in the catalog.
#[test]
fn every_s81_invariant_is_mapped() {
    let md = spec_invariants_md();
    let section = md.split("## dynamo_fpm.md §8.1").nth(1).expect("the §8.1 section");
    let table = section.split("### Proposed checks").next().unwrap();
    let mut numbers = Vec::new();
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for row in table.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| #")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        numbers.push(cells[0].trim_start_matches("| ").parse::<u32>().expect("a row number"));
        let status = cells[3].trim();
        assert!(
            ["checked", "partly", "missing", "not checkable"].contains(&status),
            "row {}: status {status:?}",
            numbers.last().unwrap()
        );
        *counts.entry(status).or_default() += 1;
        for id in cells[2].split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')) {
            let catalog_style = ["PL-", "KV-", "DY-"].iter().any(|p| id.starts_with(p));
            if catalog_style {
                assert!(
                    kvsim_core::invariants::InvariantId::parse(id).is_some(),
                    "row {}: {id} is not in the catalog",
                    numbers.last().unwrap()
                );
            }
        }
    }
    assert_eq!(
        numbers,
        (1..=55).collect::<Vec<_>>(),
        "one row per §8.1 invariant, in order"
    );
    let line = format!(
        "**Counts:** {} checked · {} partly · {} missing · {} not checkable.",
        counts["checked"], counts["partly"], counts["missing"], counts["not checkable"]
    );
    assert!(section.contains(&line), "the counts line should read: {line}");
}

#[test]
fn pl_deadline_a_point_injected_after_the_soft_timeout() {
    let steps = vec![
        (0, 0, vec![json!({"op": "inject_point", "point": 1})]),
        (1, 0, vec![json!({"op": "inject_point", "point": 2})]),
    ];
    let mut good = plan(scenario(None, 1, 32), steps.clone());
    good["faults"] = json!([{"fault": "soft_timeout", "step": 2}]);
    assert_passes(&good);
    let mut bad = plan(scenario(None, 1, 32), steps);
    bad["faults"] = json!([{"fault": "soft_timeout", "step": 1}]);
    assert_trips(&bad, "PL-DEADLINE");
}

#[test]
fn pl_deadline_spares_a_ranks_first_point() {
    // `_bench_stop_at_timeout_boundary` returns early until a point finished
    // (dynamo_fpm.md §1.12): 1.6.1 runs the first point past the deadline.
    let steps = vec![(1, 0, vec![json!({"op": "inject_point", "point": 1})])];
    let mut first = plan(scenario(None, 1, 32), steps);
    first["faults"] = json!([{"fault": "soft_timeout", "step": 1}]);
    assert_passes(&first);
}

#[test]
fn pl_deadline_judges_a_points_own_admission_by_the_point_not_as_a_stage() {
    // 1.6.1's synthetic decode point admits its prompt in the injection step
    // (then marks it computed): point execution, not a stage build.
    let mut ops = vec![json!({"op": "inject_point", "point": 1})];
    ops.extend(prefill("p", 8));
    let mut point = plan(scenario(None, 1, 32), vec![(1, 0, ops)]);
    point["faults"] = json!([{"fault": "soft_timeout", "step": 1}]);
    assert_passes(&point);
    // The same prefill without the injection is a stage starting past the deadline.
    let mut stage = plan(scenario(None, 1, 32), vec![(1, 0, prefill("p", 8))]);
    stage["faults"] = json!([{"fault": "soft_timeout", "step": 1}]);
    assert_trips(&stage, "PL-DEADLINE");
}

/// One step of a recorded plan: request `a` prefilled, then what the real
/// manager held at the end of the step.
fn observed(extra: Value) -> Value {
    let mut obs = json!({"op": "observe", "free_blocks": 29, "live": 1,
                         "tables": {"a": [[1, 2]]}, "free_head": [3, 4]});
    for (k, v) in extra.as_object().unwrap() {
        obs[k] = v.clone();
    }
    let mut ops = prefill("a", 8);
    ops.push(obs);
    plan(scenario(None, 1, 32), vec![(0, 0, ops)])
}

#[test]
fn dy_runner_table_the_runner_is_handed_other_blocks_than_the_manager_holds() {
    assert_passes(&observed(json!({})));
    assert_trips(
        &observed(json!({"runner_mismatch": "a group 0: runner holds [1, 7], the manager [1, 2]"})),
        "DY-RUNNER-TABLE",
    );
}

#[test]
fn an_observation_kvsim_does_not_reproduce_is_a_mismatch() {
    for bad in [
        json!({"free_blocks": 28}),
        json!({"tables": {"a": [[2, 1]]}}),
        json!({"free_head": [4, 3]}),
        json!({"live": 2}),
        json!({"unmodelled": ["step 0: block_pool.touch called by the planner directly"]}),
    ] {
        match outcome(&observed(bad.clone())) {
            Outcome::Mismatch(_) => {}
            other => panic!("{bad}: expected a mismatch, got {other:?}"),
        }
    }
}

#[test]
fn dy_raised_and_dy_stalled_a_recorded_planner_that_failed() {
    let failed = |kind: &str| {
        let mut ops = prefill("a", 8);
        ops.push(json!({"op": "planner_failed", "kind": kind, "error": "AssertionError: "}));
        plan(scenario(None, 1, 32), vec![(0, 0, ops)])
    };
    assert_trips(&failed("raised"), "DY-RAISED");
    assert_trips(&failed("stalled"), "DY-STALLED");
    match outcome(&failed("raised")) {
        Outcome::Violation(f) => assert!(
            f.detail
                .contains("left behind: 2 referenced blocks, 2 prefix-cache keys, 1 live requests"),
            "{}",
            f.detail
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn pl_window_a_shadow_forking_its_tail_from_the_null_block() {
    // Chain `c` (8 tokens) on full + sliding window(4): its window group's first
    // block is null once the window moved past it (Dynamo 1.6.1's crash).
    let steps = |src: u32| {
        let groups = json!([{"shared": [1], "tail": [5], "cow_from": 2},
                            {"shared": [], "tail": [6], "cow_from": src}]);
        vec![
            (0, 0, prefill("c", 8)),
            (
                1,
                0,
                vec![
                    json!({"op": "register_shadow", "shadow": "s", "chain": "c", "ctx": 4, "headroom": 1,
                               "tail": "cow", "groups": groups, "ok": true, "covered": true}),
                ],
            ),
        ]
    };
    assert_passes(&plan(scenario(Some(4), 1, 32), steps(3)));
    assert_trips(&plan(scenario(Some(4), 1, 32), steps(0)), "PL-WINDOW");
}

#[test]
fn pl_steady_a_point_timed_on_its_admission_step_only() {
    let steps = |steady: bool, admitted: bool| {
        let mut admission = vec![json!({"op": "inject_point", "point": 1})];
        if admitted {
            admission.extend([
                json!({"op": "begin_timed", "point": 1}),
                json!({"op": "end_timed", "point": 1}),
            ]);
        }
        let mut after = vec![];
        if steady {
            after.extend([
                json!({"op": "begin_timed", "point": 1}),
                json!({"op": "end_timed", "point": 1}),
            ]);
        }
        after.push(json!({"op": "end_sweep"}));
        plan(scenario(None, 1, 32), vec![(0, 0, admission), (1, 0, after)])
    };
    assert_passes(&steps(true, true));
    assert_trips(&steps(false, true), "PL-STEADY");
    // A point whose injection fell short is skipped untimed: nothing to steady.
    assert_passes(&steps(false, false));
}

#[test]
fn pl_coordinate_a_point_measured_off_its_coordinate() {
    // Request `a` is prefilled to 7 tokens, then point 1 is admitted and steadied on it.
    // Recorded plans state the admitted lengths (`source.points`): 7 is one short of the
    // context 8 the steady step reads.
    let timed = |schedule: bool| {
        let mut ops = vec![];
        if schedule {
            ops.push(json!({"op": "schedule", "req": "a", "num_new_tokens": 1}));
        }
        ops.extend([
            json!({"op": "begin_timed", "point": 1}),
            json!({"op": "forward", "batch": [{"req": "a", "tokens": 1, "output": [9]}]}),
            json!({"op": "end_timed", "point": 1}),
            json!({"op": "process_outputs"}),
        ]);
        ops
    };
    let with_source = |admitted: u64| {
        let mut admission = vec![json!({"op": "inject_point", "point": 1})];
        admission.extend(timed(true));
        let mut p = plan(
            scenario(None, 1, 32),
            vec![(0, 0, prefill("a", 7)), (1, 0, admission), (2, 0, timed(true))],
        );
        p["source"] = json!({"planner": "dynamo", "version": "1.6.1", "vllm": "0.31.0",
            "source_sha256": "0", "installed": true,
            "points": [{"point": 1, "step": 1, "batch": 1, "context_lengths": [admitted], "kind": "shadow"}]});
        p
    };
    assert_passes(&with_source(7));
    // Admitted at its context (8) instead of one short: the admission reads 7 where 8 was due.
    assert_trips(&with_source(8), "PL-COORDINATE");
    match outcome(&with_source(6)) {
        Outcome::Violation(f) => assert!(
            f.detail
                .contains("point 1: its admission step reads computed contexts [7] where its coordinate gives [6]"),
            "{}",
            f.detail
        ),
        other => panic!("{other:?}"),
    }
}
