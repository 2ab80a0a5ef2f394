//! The incremental model invariants (what an op changed, plus full scans at checkpoints)
//! are as strong as the full scan after every op (`--paranoid`): on every mutant's shrunk
//! plan and first failing swarm plan, and on swarm cases under every mutant, both modes stop
//! at the same op with the same finding.

use kvsim_core::bugs::Mutant;
use kvsim_core::fpm::scenarios::{builtin_scenarios, BuiltinScenario};
use kvsim_core::plan::Plan;
use kvsim_sim::check::case::CaseSpec;
use kvsim_sim::check::case_seed;
use kvsim_sim::check::run::run_case;
use kvsim_sim::check::suite::{hunt, CheckConfig};
use kvsim_sim::exec::{run_plan_opts, Outcome, RunOptions, RunReport};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

fn run(plan: &Plan, mutant: Option<Mutant>, paranoid: bool) -> RunReport {
    let opts = RunOptions {
        paranoid,
        ..RunOptions::quiet(mutant)
    };
    run_plan_opts(plan, opts, &mut |_, _| {})
}

/// Both modes agree on `plan`; returns whether it failed.
fn same_in_both_modes(plan: &Plan, mutant: Option<Mutant>, what: &str) -> bool {
    let full = run(plan, mutant, true);
    let inc = run(plan, mutant, false);
    assert_eq!(full.outcome, inc.outcome, "{what}: the modes disagree");
    assert_eq!(
        (full.ops, full.steps),
        (inc.ops, inc.steps),
        "{what}: stopped at a different op"
    );
    assert_eq!(full.events, inc.events, "{what}");
    !matches!(full.outcome, Outcome::Passed)
}

fn spec(index: u64, base: &BuiltinScenario) -> CaseSpec {
    CaseSpec::draw(&mut ChaCha8Rng::seed_from_u64(case_seed(0, index)), base)
}

#[test]
fn every_mutant_stops_at_the_same_op_in_both_modes() {
    let scenarios = builtin_scenarios();
    let cfg = CheckConfig {
        seed: 0,
        cases: 100,
        shard: (1, 1),
        scenarios: scenarios.clone(),
        only: None,
        jobs: 1,
    };
    for m in Mutant::all() {
        let row = hunt(&cfg, m);
        assert!(row.killed, "{m} survived");
        let engine_mutant = m.in_engine().then_some(m);
        let shrunk = row.plan.as_ref().expect("a killed mutant has a shrunk plan");
        assert!(same_in_both_modes(shrunk, engine_mutant, &format!("{m} shrunk")));
        // The unshrunk plan of the case that killed it.
        let case = row.case.unwrap();
        let base = &scenarios[(case % scenarios.len() as u64) as usize];
        let original = run_case(base, &spec(case, base), Some(m))
            .plan
            .expect("the killing case fails again");
        assert!(same_in_both_modes(
            &original,
            engine_mutant,
            &format!("{m} case {case}")
        ));
    }
}

#[test]
fn swarm_cases_agree_in_both_modes_under_every_mutant() {
    let scenarios = builtin_scenarios();
    let mut failed = 0;
    for m in Mutant::all() {
        for case in 0..2 * scenarios.len() as u64 {
            let base = &scenarios[(case % scenarios.len() as u64) as usize];
            if let Some(plan) = run_case(base, &spec(case, base), Some(m)).plan {
                let what = format!("{m} case {case}");
                failed += usize::from(same_in_both_modes(&plan, m.in_engine().then_some(m), &what));
            }
        }
    }
    assert!(failed > 50, "only {failed} failing plans compared");
}
