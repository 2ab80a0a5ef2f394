//! Our property suite, with kvsim as the library: kvsim's planners over our scenario under
//! kvsim's swarm knobs (proptest shrinks a failing case's knobs, kvsim shrinks its plan),
//! a planted bug caught and shrunk, and our own planner's plans under kvsim's invariants.
//!
//! proptest-regressions/property_suite.txt holds the case this suite found first: chains on
//! our full + sliding-window layout failed mid-sweep in kvsim's port (kvsim's gate now refuses
//! chains for windowed layouts, so the case is not applicable). It runs before new cases.

use kvsim_examples::{acme, our_plan};
use kvsim_sim::api::{self, check_case, op_count, shrink, CaseSpec, Mutant, Outcome, Verdict};
use kvsim_sim::strategies::{case_spec, scenario_variant};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestError, TestRunner};

fn persisted(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        // Failing seeds are kept in proptest-regressions/ (checked in) and run first.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/property_suite.txt",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(persisted(24))]

    /// Every swarm case of our scenario passes, or does not apply (a strategy the gate
    /// refuses for our layout is refused by the planner too: a gate probe).
    #[test]
    fn every_swarm_case_of_our_model_passes(spec in case_spec()) {
        let out = check_case(&acme(), &spec, None).map_err(|f| TestCaseError::fail(f.to_string()))?;
        prop_assert!(!out.verdict.failed(), "{:?}", out.verdict);
        if out.verdict == Verdict::Passed {
            prop_assert!(out.ops > 0);
        }
    }

    /// Scaled-down variants of our model sweep with the gate's own strategy, every invariant
    /// holding.
    #[test]
    fn every_variant_of_our_model_sweeps_clean(s in scenario_variant(acme())) {
        let report = api::check_scenario(&s, None).map_err(|e| TestCaseError::fail(format!("{}: {e}", s.name)))?;
        prop_assert!(report.steps > 0);
    }

    /// Our planner's plans pass every invariant, whatever the context and decode count.
    #[test]
    fn our_planner_keeps_every_invariant(ctx in 1u64..40, decodes in 1u64..4) {
        let plan = our_plan(ctx, decodes, false).map_err(|e| TestCaseError::fail(e.to_string()))?;
        api::run(&plan).expect_passed().map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}

#[test]
fn our_planners_window_slip_is_caught_where_it_happens() {
    let plan = our_plan(12, 2, true).unwrap();
    let report = api::run(&plan);
    let Outcome::Violation(f) = &report.outcome else {
        panic!("expected a violation, got {:?}", report.outcome)
    };
    assert_eq!(f.invariant.as_deref(), Some("PL-WINDOW"));
    assert_eq!((f.step, f.rank, f.op_index), (1, 0, Some(2))); // the forward that reads it
                                                               // kvsim shrinks the plan to the ops that still break the same invariant.
    let small = shrink(&plan, None, "PL-WINDOW");
    assert!(op_count(&small) < op_count(&plan), "{} ops", op_count(&small));
    assert!(matches!(api::run(&small).outcome, Outcome::Violation(g) if g.invariant == f.invariant));
}

/// A seed bug switched back on in kvsim's planner (Dynamo's shed-without-finish): the swarm
/// over our scenario finds it, proptest shrinks the knobs, kvsim the plan.
#[test]
fn a_planted_bug_is_found_and_shrunk_on_our_model() {
    let mutant: Mutant = "shed-without-finish".parse().unwrap();
    let base = acme();
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    let found = runner.run(&case_spec(), |spec| match check_case(&base, &spec, Some(mutant)) {
        Err(f) if matches!(&f.verdict, Verdict::Violation { invariant, .. } if mutant.caught_by(invariant)) => {
            Err(TestCaseError::fail(f.to_string()))
        }
        _ => Ok(()),
    });
    let Err(TestError::Fail(why, minimal)) = found else {
        panic!("{mutant} survived 256 cases of our scenario: {found:?}")
    };
    // The shrunk knobs: one failure mode, most features off.
    let on = features_on(&minimal);
    assert!(on <= 4, "{on} features still on after shrinking: {minimal:?} ({why})");
    let failure = check_case(&base, &minimal, Some(mutant)).unwrap_err();
    let plan = failure.shrunk.expect("a violation's plan is shrunk");
    assert!(
        op_count(&plan) < failure.original_ops,
        "{} of {} ops after shrinking",
        op_count(&plan),
        failure.original_ops
    );
    // A planner mutant leaves the bug in the plan: it replays without the mutant.
    assert!(
        matches!(api::run(&plan).outcome, Outcome::Violation(f) if mutant.caught_by(f.invariant.as_deref().unwrap_or("")))
    );
}

fn features_on(c: &CaseSpec) -> usize {
    [
        c.second_group,
        c.giant,
        c.async_scheduling,
        c.random_kda,
        c.dp2,
        c.timeout_pct.is_some(),
        c.delay_outputs.is_some(),
        c.stage_failure.is_some(),
        c.shrink_pool.is_some(),
        c.message_lag.is_some(),
        c.shared_prompt_content,
        c.retire_in_flight,
        c.reset_probe,
    ]
    .iter()
    .filter(|&&b| b)
    .count()
}
