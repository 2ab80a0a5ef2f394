//! FPM model II: the soft timeout (dynamo_fpm.md §1.12; §8.1 invariant 36; §8.2
//! bug 5). A deadline landing mid-build stops the sweep cleanly: every invariant
//! holds (PL-DEADLINE included: the planner records the step it saw the deadline
//! as a `soft_timeout` fault), the artifact is partial with `stop_reason:
//! "timeout"`, and the rows measured before the deadline are exactly the prefix
//! of the untimed run's rows.

use kvsim_core::fpm::artifact::RankArtifact;
use kvsim_core::fpm::gate::Strategy;
use kvsim_core::fpm::scenarios::{find_scenario, BuiltinScenario};
use kvsim_core::fpm::sweep::SweepOptions;
use kvsim_core::plan::{FaultSpec, PlanOp};
use kvsim_sim::sweep::{run_sweep, run_sweep_with, SweepRun};
use kvsim_tests::schema::assert_valid_ser;
use serde_json::Value;

/// Rows without the plan hash (which differs between the two plans).
fn rows(a: &RankArtifact) -> Vec<Value> {
    a.results
        .iter()
        .map(|r| {
            let mut v = serde_json::to_value(r).unwrap();
            for f in v["fpms"].as_array_mut().unwrap() {
                f["benchmark_measurement"]["preparation"]["plan"] = Value::Null;
            }
            v
        })
        .collect()
}

fn timed(s: &BuiltinScenario, strategy: Strategy, seconds: f64) -> SweepRun {
    let name = &s.name;
    let opts = SweepOptions {
        timeout_seconds: Some(seconds),
        ..SweepOptions::default()
    };
    let run = run_sweep_with(s, Some(strategy), &opts, &mut |_, _| {}).unwrap();
    assert!(run.report.passed(), "{name} @ {seconds}: {:?}", run.report.outcome);
    for (rank, a) in run.artifacts.iter().enumerate() {
        assert_valid_ser("artifact", &format!("{} rank {rank}", s.name), a);
    }
    assert_valid_ser("plan", &s.name, &run.plan);
    run
}

/// Sweep `name` with deadlines across the untimed run; returns how many landed
/// mid-stage (`mid_stage` says whether a run abandoned a stage).
fn sweep_with_deadlines(s: &BuiltinScenario, strategy: Strategy, mid_stage: impl Fn(&SweepRun) -> bool) -> usize {
    let name = &s.name;
    let full = run_sweep(s, Some(strategy)).unwrap();
    assert!(full.report.passed());
    assert_eq!(full.artifacts[0].status, "complete");
    assert!(full.artifacts[0].stop_reason.is_none());
    let total = full.report.sim_time_ns as f64 / 1e9;
    let mut landed_mid_stage = 0;
    for k in 1..40 {
        let run = timed(s, strategy, total * f64::from(k) / 40.0);
        for (rank, a) in run.artifacts.iter().enumerate() {
            let want = rows(&full.artifacts[rank]);
            let got = rows(a);
            assert_eq!(
                got,
                want[..got.len()],
                "{name} k={k}: measured rows are the untimed prefix"
            );
            assert_eq!(
                a.coverage, run.artifacts[0].coverage,
                "every rank stops at the same point"
            );
            if got.len() < want.len() {
                assert_eq!(a.status, "partial");
                assert_eq!(a.stop_reason.as_deref(), Some("timeout"));
                assert!(!a.valid);
                assert!(a.coverage["completed_points"].as_u64() < a.coverage["expected_points"].as_u64());
                assert!(
                    run.plan
                        .faults
                        .iter()
                        .any(|f| matches!(f, FaultSpec::SoftTimeout { .. })),
                    "the deadline step is in the plan, so PL-DEADLINE checked it"
                );
            }
        }
        if mid_stage(&run) {
            landed_mid_stage += 1;
        }
    }
    landed_mid_stage
}

#[test]
fn a_chain_sweep_stopped_mid_build_keeps_every_measured_point() {
    let mid_build = |run: &SweepRun| {
        run.artifacts[0]
            .kvwarm
            .stages
            .iter()
            .any(|s| s["soft_timeout"] == Value::Bool(true))
    };
    let mut s = find_scenario("deepseek-mla").unwrap();
    let n = sweep_with_deadlines(&s, Strategy::Chain, mid_build);
    assert!(n > 0, "some deadline lands while a rung is being built");
    // The same under attention DP = 2: both ranks stop at the same point.
    s.scenario.dp_ranks = 2;
    let n = sweep_with_deadlines(&s, Strategy::Chain, mid_build);
    assert!(n > 0);
}

#[test]
fn a_native_sweep_stopped_mid_prefill_keeps_every_measured_point() {
    let n = sweep_with_deadlines(&find_scenario("inkling-tp4").unwrap(), Strategy::Native, |run| {
        run.plan
            .steps
            .iter()
            .flat_map(|s| &s.ops)
            .any(|op| matches!(op, PlanOp::Shed { .. }))
    });
    assert!(n > 0, "some deadline lands during a point's exact-context prefill");
}

#[test]
fn the_dp2_scenario_stops_on_both_ranks_at_the_same_point() {
    let run = timed(&find_scenario("inkling-tp4-dp2").unwrap(), Strategy::Native, 0.03);
    let [a, b] = [&run.artifacts[0], &run.artifacts[1]];
    assert_eq!(a.status, "partial");
    assert_eq!(b.stop_reason.as_deref(), Some("timeout"));
    assert_eq!(a.coverage, b.coverage);
}

#[test]
fn the_default_timeout_is_far_beyond_a_simulated_sweep() {
    let s = find_scenario("deepseek-mla").unwrap();
    let run = run_sweep(&s, Some(Strategy::Chain)).unwrap();
    assert!(run.plan.faults.is_empty());
    assert_eq!(run.artifacts[0].status, "complete");
}
