//! The bounded exhaustive mode (spec/exhaustive.md): the unmutated model keeps
//! every KV-* invariant on every reachable state of the default bounds and reaches
//! the events where pool bugs live; each deliberate model mutant is found by the
//! invariant it breaks, with a shortest sequence that replays to the same violation.

use kvsim_core::invariants::InvariantId;
use kvsim_core::kv::ModelMutant;
use kvsim_core::kvtrace::{replay_value, ReplayEnd};
use kvsim_sim::exhaustive::{explore, explore_jobs, replay_checked, Bounds, Event, Layout};
use serde_json::Value;

/// Distinct states the default bounds must visit (203,527 measured; spec/exhaustive.md §5).
const DEFAULT_STATES_FLOOR: u64 = 150_000;

/// Per mutant, the length (alphabet ops) of the shortest sequence that breaks its invariant.
const SHORTEST: [(ModelMutant, usize); 5] = [
    (ModelMutant::TouchForgetsRef, 4),
    (ModelMutant::TouchKeepsFreeQueue, 4),
    (ModelMutant::StaleCacheEntry, 6),
    (ModelMutant::LeakOnFree, 3),
    (ModelMutant::HandOutNullBlock, 0),
];

/// The observation lines of a trace replayed on the unmutated model (as `kvsim trace` prints them).
fn observations(trace: &Value) -> Vec<Value> {
    let replay = replay_value(trace).expect("emitted traces are kvtraces");
    assert_eq!(replay.end, ReplayEnd::Completed, "emitted ops are valid kvtrace ops");
    replay.lines.iter().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_unmutated_model_keeps_every_invariant_and_reaches_every_pool_event() {
    let bounds = Bounds::default();
    let report = explore(&bounds, None).unwrap();
    assert!(report.first_violation.is_none(), "{:?}", report.first_violation);
    assert_eq!(report.model_errors, 0, "{:?}", report.first_model_error);
    assert_eq!(report.depth, bounds.max_ops);
    assert!(report.states >= DEFAULT_STATES_FLOOR, "{} states", report.states);
    assert!(
        report.sequences > u128::from(report.ops),
        "dedup covers more sequences than it runs"
    );
    // Every event but the window free and the hybrid fixed point (one full-attention group).
    for e in Event::ALL
        .into_iter()
        .filter(|e| ![Event::WindowFree, Event::FixedPointReask].contains(e))
    {
        assert!(report.reached.contains_key(&e), "{e:?} never happened");
    }
}

#[test]
fn event_witnesses_are_valid_traces_that_show_the_event() {
    // Every event is first reached within 6 ops (BFS: the witnesses are shortest).
    let bounds = Bounds {
        max_ops: 6,
        ..Bounds::default()
    };
    let report = explore(&bounds, None).unwrap();
    let witness = |e: Event| {
        let ops = report.reached.get(&e).unwrap_or_else(|| panic!("{e:?} not reached"));
        observations(&bounds.kvtrace(ops, Value::Null))
    };
    let last_result = |lines: &[Value]| lines.last().unwrap()["result"].clone();
    let lines = witness(Event::AllocationRefused);
    assert_eq!(lines.last().unwrap()["op"], "allocate_slots");
    assert_eq!(last_result(&lines), Value::Null);
    let lines = witness(Event::PrefixHit);
    let lookup = &lines[lines.len() - 2];
    assert_eq!(lookup["op"], "get_computed_blocks");
    assert!(lookup["result"]["num_computed_tokens"].as_u64().unwrap() > 0);
    let lines = witness(Event::ResetRefused);
    assert_eq!(last_result(&lines), Value::Bool(false));
    let lines = witness(Event::DuplicateKey);
    let last = lines.last().unwrap();
    let ids = last["cached_block_ids"].as_array().unwrap().len() as u64;
    assert!(
        ids > last["cached_blocks"].as_u64().unwrap(),
        "two blocks under one key"
    );
    let lines = witness(Event::SharedHit);
    let tables = &lines.last().unwrap()["requests"];
    let held = |r: &str| tables[r][0].as_array().unwrap().clone();
    assert!(
        held("a").iter().any(|b| held("b").contains(b)),
        "a and b share a block: {tables}"
    );
    for e in [Event::TouchFreeBlock, Event::EvictCachedBlock, Event::Readmission] {
        witness(e);
    }
}

#[test]
fn every_model_mutant_is_found_by_the_invariant_it_breaks_with_a_shortest_sequence() {
    for (mutant, shortest) in SHORTEST {
        let report = explore(&Bounds::default(), Some(mutant)).unwrap();
        let found = report.first_violation.unwrap_or_else(|| panic!("{mutant} not found"));
        let ids: Vec<InvariantId> = found.violations.iter().map(|v| v.id).collect();
        assert!(ids.contains(&mutant.breaks()), "{mutant}: {ids:?}");
        assert_eq!(found.ops.len(), shortest, "{mutant}: {:?}", found.ops);
        assert_eq!(
            report.depth,
            shortest.saturating_sub(1),
            "{mutant}: BFS stops at the shortest"
        );

        // The kvtrace replays on the same mutant to the same violation, at its last op...
        let replayed = replay_checked(&found.trace, Some(mutant)).unwrap();
        let n = found.trace["ops"].as_array().unwrap().len();
        assert_eq!(replayed.ops_applied, n, "{mutant}");
        assert_eq!(replayed.violations, found.violations, "{mutant}");
        assert_eq!(replayed.error, None, "{mutant}");
        // ...while the unmutated model replays it cleanly (`kvsim trace FILE` too).
        let clean = replay_checked(&found.trace, None).unwrap();
        assert_eq!((clean.ops_applied, clean.violations), (n, vec![]), "{mutant}");
        observations(&found.trace);
    }
}

#[test]
fn a_sliding_window_layout_keeps_every_invariant_and_frees_out_of_window_blocks() {
    let bounds = Bounds {
        layout: Layout::FullAndSlidingWindow { sliding_window: 2 },
        max_ops: 8,
        ..Bounds::default()
    };
    let report = explore(&bounds, None).unwrap();
    assert!(report.first_violation.is_none(), "{:?}", report.first_violation);
    assert_eq!(report.model_errors, 0, "{:?}", report.first_model_error);
    for e in [Event::WindowFree, Event::PrefixHit, Event::AllocationRefused] {
        assert!(report.reached.contains_key(&e), "{e:?} never happened");
    }
    for mutant in ModelMutant::ALL {
        let found = explore(&bounds, Some(mutant)).unwrap().first_violation.unwrap();
        assert!(found.violations.iter().any(|v| v.id == mutant.breaks()), "{mutant}");
        let replayed = replay_checked(&found.trace, Some(mutant)).unwrap();
        assert_eq!(replayed.violations, found.violations, "{mutant}");
    }
}

#[test]
fn the_search_is_deterministic() {
    let bounds = Bounds {
        max_ops: 5,
        ..Bounds::default()
    };
    let (one, two) = (explore(&bounds, None).unwrap(), explore(&bounds, None).unwrap());
    assert_eq!(
        (one.states, one.ops, one.sequences),
        (two.states, two.ops, two.sequences)
    );
    assert_eq!(one.reached, two.reached);
}

#[test]
fn bounds_beyond_the_tiny_limits_are_refused_listing_every_problem() {
    let bounds = Bounds {
        num_blocks: 40,
        prompts: vec![vec![1]; 4],
        ..Bounds::default()
    };
    let err = explore(&bounds, None).unwrap_err();
    assert_eq!(err.0.len(), 2, "{err}");
}

/// The search on several threads is the search on one: same counts, same shortest
/// counterexamples, same first events (the threads only apply ops and check states).
#[test]
fn threads_do_not_change_the_search() {
    let bounds = Bounds {
        max_ops: 7,
        ..Bounds::default()
    };
    let mutants = std::iter::once(None).chain(SHORTEST.iter().map(|(m, _)| Some(*m)));
    for m in mutants {
        let one = explore_jobs(&bounds, m, 1, &mut |_, _| {}).unwrap();
        let three = explore_jobs(&bounds, m, 3, &mut |_, _| {}).unwrap();
        let key = |r: &kvsim_sim::exhaustive::ExhaustiveReport| {
            (
                r.states,
                r.ops,
                r.sequences,
                r.depth,
                r.exhausted,
                r.max_frontier,
                r.model_errors,
                r.reached.clone(),
                r.first_violation.as_ref().map(|c| (c.ops.clone(), c.trace.clone())),
            )
        };
        assert_eq!(key(&one), key(&three), "{m:?}");
    }
}

#[test]
fn the_hybrid_bounds_reach_the_coordinators_fixed_point() {
    let bounds = Bounds::hybrid();
    let report = explore(&bounds, None).unwrap();
    assert!(report.first_violation.is_none(), "{:?}", report.first_violation);
    assert_eq!(report.model_errors, 0, "{:?}", report.first_model_error);
    let ops = report
        .reached
        .get(&Event::FixedPointReask)
        .expect("the fixed point re-asks a group");
    assert_eq!(ops.len(), 8, "shortest witness: {ops:?}");
    // The witness, replayed as a kvtrace, re-asks there too (what `kvsim conformance` counts).
    let replay = replay_value(&bounds.kvtrace(ops, Value::Null)).unwrap();
    assert_eq!(replay.end, ReplayEnd::Completed);
    assert!(replay.fixed_point_reasks > 0);
    // Two windows of one size are one spec group: no fixed point to iterate.
    let same = Bounds {
        layout: Layout::FullAndTwoWindows { windows: [2, 2] },
        ..Bounds::hybrid()
    };
    assert!(explore(&same, None).is_err(), "equal windows are refused");
}
