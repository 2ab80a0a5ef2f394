//! `kvsim check` as a library: the swarm suites pass on every built-in scenario,
//! every mutant is killed by its invariant with a small shrunk plan that replays,
//! shards partition a run, and a proptest state-machine-style suite draws cases
//! whose failures shrink (proptest over the case knobs, then delta debugging over
//! the plan) and persist as regressions.

use kvsim_core::bugs::Mutant;
use kvsim_core::fpm::scenarios::builtin_scenarios;
use kvsim_core::plan::load_plan;
use kvsim_sim::check::case::CaseSpec;
use kvsim_sim::check::merge::{merge, MergeError};
use kvsim_sim::check::run::{run_case, Verdict};
use kvsim_sim::check::shrink::{op_count, shrink};
use kvsim_sim::check::suite::{check, hunt, CheckConfig};
use kvsim_sim::exec::{run_plan_opts, Outcome, RunOptions};
use kvsim_sim::strategies::case_spec;
use kvsim_tests::schema::assert_valid;
use proptest::prelude::*;

fn config(cases: u64, seed: u64, shard: (u64, u64)) -> CheckConfig {
    CheckConfig {
        seed,
        cases,
        shard,
        scenarios: builtin_scenarios(),
        only: None,
        jobs: 2,
    }
}

#[test]
fn the_suites_pass_on_every_builtin_scenario_and_reach_every_goal() {
    let r = check(&config(40, 0, (1, 1)), &mut |_, _| {});
    assert_valid("check", "check --json", &serde_json::to_value(&r).unwrap());
    assert!(r.failures.is_empty(), "{:#?}", r.failures);
    assert_eq!(r.scenarios.len(), 7);
    for s in &r.scenarios {
        assert!(s.passed > 0, "{}: no case ran", s.scenario);
        assert_eq!(s.invariants_held, s.invariants_total, "{}", s.scenario);
    }
    assert!(r.missed_goals.is_empty(), "missed: {:?}", r.missed_goals);
    assert!(r.exhaustive.as_ref().is_some_and(|x| x.violation.is_none()));
    assert!(r.passed(true));
}

#[test]
fn shards_partition_a_run() {
    let whole = check(&config(6, 3, (1, 1)), &mut |_, _| {});
    let parts: Vec<_> = (1..=3).map(|k| check(&config(6, 3, (k, 3)), &mut |_, _| {})).collect();
    assert_eq!(parts.iter().map(|p| p.cases_run).sum::<u64>(), whole.cases_run);
    for (name, total) in whole
        .scenarios
        .iter()
        .map(|s| (&s.scenario, (s.cases, s.passed, s.ops)))
    {
        let mut sum = (0, 0, 0);
        for p in &parts {
            if let Some(s) = p.scenarios.iter().find(|s| &s.scenario == name) {
                sum = (sum.0 + s.cases, sum.1 + s.passed, sum.2 + s.ops);
            }
        }
        assert_eq!(sum, total, "{name}");
    }
    for (goal, n) in &whole.goals {
        assert_eq!(parts.iter().map(|p| p.goals[goal]).sum::<u64>(), *n, "{goal}");
    }
    // The exhaustive pass runs once, in the last shard.
    let ran: Vec<bool> = parts.iter().map(|p| p.exhaustive.is_some()).collect();
    assert_eq!(ran, [false, false, true]);
    assert_eq!(parts[2].exhaustive, whole.exhaustive);
}

#[test]
fn merged_shards_are_the_unsharded_report_and_bad_sets_are_refused() {
    let json = |r: &kvsim_sim::check::suite::CheckReport| serde_json::to_string_pretty(r).unwrap();
    let whole = check(&config(5, 9, (1, 1)), &mut |_, _| {});
    let mut parts: Vec<_> = (1..=4).map(|k| check(&config(5, 9, (k, 4)), &mut |_, _| {})).collect();
    parts.reverse(); // any order
    assert_eq!(json(&merge(&parts).unwrap()), json(&whole));
    assert_eq!(merge(&parts[1..]).err(), Some(MergeError::Missing(vec!["4/4".into()])));
    let mut twice = parts.clone();
    twice.push(parts[0].clone());
    assert!(matches!(merge(&twice), Err(MergeError::Duplicate { .. })));
    let mut other_seed = parts.clone();
    other_seed[1].seed = 1;
    assert!(matches!(
        merge(&other_seed),
        Err(MergeError::Differs { what: "seed", .. })
    ));
    assert_eq!(merge(&[]).err(), Some(MergeError::Empty));
}

#[test]
fn every_case_applies_but_the_gate_probes() {
    // Strategies come from what each layout's gate allows; only the few probes of a
    // refused strategy (about 4%) are n/a, and the planner refuses each of them.
    let r = check(&config(60, 0, (1, 1)), &mut |_, _| {});
    for s in &r.scenarios {
        assert!(
            s.not_applicable * 10 <= s.cases,
            "{}: {} of {} n/a",
            s.scenario,
            s.not_applicable,
            s.cases
        );
        for reason in s.not_applicable_reasons.keys() {
            assert!(
                reason.contains("does not apply to scenario <scenario>"),
                "{}: {reason}",
                s.scenario
            );
        }
        assert_eq!(s.not_applicable_reasons.values().sum::<u64>(), s.not_applicable);
    }
}

#[test]
fn every_mutant_is_killed_by_its_invariant_and_its_shrunk_plan_replays() {
    let cfg = config(100, 0, (1, 1));
    for m in Mutant::all() {
        let row = hunt(&cfg, m);
        assert!(row.killed, "{m} survived {} cases", row.cases);
        let inv = row.invariant.as_deref().unwrap();
        assert!(m.caught_by(inv), "{m} caught by {inv}");
        assert!(row.replay_reproduces, "{m}: the shrunk plan does not reproduce");
        let ops = row.shrunk_ops.unwrap();
        assert!(ops <= 20, "{m}: {ops} ops after shrinking");
        // Replayed as a user would: from JSON, with --mutant only for engine mutants.
        let written = serde_json::to_value(row.plan.as_ref().unwrap()).unwrap();
        assert_valid("plan", &format!("{m}'s shrunk plan"), &written);
        let plan = load_plan(&written.to_string()).unwrap();
        let r = run_plan_opts(&plan, RunOptions::quiet(m.in_engine().then_some(m)), &mut |_, _| {});
        assert!(matches!(&r.outcome, Outcome::Violation(f) if f.invariant.as_deref() == Some(inv)));
        if !m.in_engine() {
            continue;
        }
        // An engine mutant's plan passes on the fixed engine: the bug is the engine's.
        let fixed = run_plan_opts(&plan, RunOptions::default(), &mut |_, _| {});
        assert!(
            !matches!(&fixed.outcome, Outcome::Violation(f) if f.invariant.as_deref() == Some(inv)),
            "{m}: the fixed engine fails the same way"
        );
    }
}

/// A built-in scenario (by index) and the case knobs: kvsim's exported strategy
/// (`kvsim_sim::strategies::case_spec`), which proptest shrinks toward fewer features
/// and faults, smaller pools and fewer steps (swarm: each knob switches off).
fn case_strategy() -> impl Strategy<Value = (usize, CaseSpec)> {
    (0usize..7, case_spec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// No swarm case fails: no invariant violation, no plan/model mismatch, no
    /// planner refusal. A failure is shrunk to a minimal plan written next to the
    /// proptest regression (`kvsim replay` reproduces it).
    #[test]
    fn swarm_cases_never_fail((scenario, spec) in case_strategy()) {
        let base = &builtin_scenarios()[scenario];
        let out = run_case(base, &spec, None);
        if let (Verdict::Violation { invariant, .. }, Some(plan)) = (&out.verdict, &out.plan) {
            let small = shrink(plan, None, invariant);
            let path = std::env::temp_dir().join(format!("kvsim-swarm-{}-{invariant}.json", base.name));
            std::fs::write(&path, serde_json::to_string_pretty(&small).unwrap()).unwrap();
            prop_assert!(false, "{} {invariant}: {} ops shrunk to {}; kvsim replay {}", base.name, op_count(plan), op_count(&small), path.display());
        }
        prop_assert!(!out.verdict.failed(), "{}: {:?}", base.name, out.verdict);
    }
}
