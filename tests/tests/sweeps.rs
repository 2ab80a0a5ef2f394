//! FPM model I: every built-in scenario sweeps with every invariant holding, the
//! regimes each scenario must produce, capacity fallbacks, and artifacts that a
//! replay of the sweep's plan reproduces byte for byte. The artifacts' snapshots:
//! artifact_snapshots.rs.

use kvsim_core::fpm::gate::Strategy;
use kvsim_core::fpm::scenarios::{builtin_scenarios, find_scenario, validate_scenario, BuiltinScenario};
use kvsim_core::plan::load_plan;
use kvsim_sim::exec::run_plan;
use kvsim_sim::sweep::{artifacts_for, run_sweep, SweepRun};

fn sweep(s: &BuiltinScenario, strategy: Option<Strategy>) -> SweepRun {
    let run = run_sweep(s, strategy).unwrap_or_else(|e| panic!("{}: {e}", s.name));
    assert!(run.report.passed(), "{} {strategy:?}: {:?}", s.name, run.report.outcome);
    assert_eq!(run.artifacts.len() as u32, s.scenario.dp_ranks);
    run
}

fn regimes(run: &SweepRun) -> Vec<String> {
    run.artifacts[0]
        .results
        .iter()
        .map(|r| r.kv_seed_regime.clone())
        .collect()
}

#[test]
fn the_dense_model_reads_skip_dense_model_content_insensitive() {
    let run = sweep(&find_scenario("llama31-8b").unwrap(), None);
    let r = regimes(&run);
    assert!(!r.is_empty());
    assert!(r.iter().all(|x| x == "skip:dense_model_content_insensitive"), "{r:?}");
    let k = &run.artifacts[0].kvwarm;
    assert_eq!(k.skip_reason.as_deref(), Some("dense_model_content_insensitive"));
    assert_eq!(k.warm_eligible, Some(false));
    assert_eq!(k.points_fake_fallback, 0, "gate-skipped points are not fake fallbacks");
    assert!(k.points_gate_skipped > r.len() as u64 - 1, "replicas are counted too");
}

#[test]
fn inkling_under_auto_is_native_real_kv() {
    let run = sweep(&find_scenario("inkling-tp4").unwrap(), None);
    let k = &run.artifacts[0].kvwarm;
    assert_eq!(k.initialization_strategy.as_deref(), Some("native_exact_context"));
    let r = regimes(&run);
    assert!(r.iter().filter(|x| *x == "real_kv").count() >= r.len() - 1, "{r:?}");
    // The untimed prefill is about Σ total_kv_read_tokens over the decode executions (seed 000).
    let kv_sum: u64 = run
        .meta
        .executions
        .iter()
        .filter(|e| e.kv_seed_regime == "real_kv")
        .map(|e| e.point.total_kv_read_tokens)
        .sum();
    let warm = run.meta.untimed_prefill_tokens;
    assert!(
        warm <= kv_sum && warm + 2 * 64 * 14 >= kv_sum,
        "warm {warm} vs Σ kv {kv_sum}"
    );
}

#[test]
fn glm_is_native_with_a_state_group() {
    let s = find_scenario("glm53-flash").unwrap();
    assert!(s.scenario.is_state_group(1));
    let run = sweep(&s, None);
    assert_eq!(
        run.artifacts[0].kvwarm.initialization_strategy.as_deref(),
        Some("native_exact_context")
    );
    assert!(regimes(&run).iter().any(|x| x == "real_kv"));
}

#[test]
fn a_pool_too_small_for_a_point_falls_back_with_a_capacity_entry() {
    let mut s = find_scenario("inkling-tp4").unwrap();
    s.scenario.pool_blocks = 700;
    let run = sweep(&s, Some(Strategy::Native));
    let art = &run.artifacts[0];
    let falls = &art.kvwarm.capacity_fallbacks;
    assert!(!falls.is_empty());
    for f in falls {
        assert!(f.required_blocks > f.usable_blocks);
        let id = f.benchmark_id.expect("single-rank fallbacks carry their benchmark id");
        let row = art.results.iter().find(|r| r.point.benchmark_id == id);
        if let Some(row) = row {
            assert_eq!(row.kv_seed_regime, "fake_fallback");
            assert_eq!(f.total_kv_read_tokens, row.point.total_kv_read_tokens);
        }
    }
    assert!(art.results.iter().any(|r| r.kv_seed_regime == "fake_fallback"));
    assert_eq!(
        art.kvwarm.points_fake_fallback as usize,
        run.meta
            .executions
            .iter()
            .filter(|e| e.kv_seed_regime == "fake_fallback")
            .count()
    );
}

#[test]
fn the_dp2_scenario_writes_one_artifact_per_rank_with_identical_points() {
    let run = sweep(&find_scenario("inkling-tp4-dp2").unwrap(), None);
    let [a, b] = [&run.artifacts[0], &run.artifacts[1]];
    assert_eq!((a.dp["rank"].as_u64(), b.dp["rank"].as_u64()), (Some(0), Some(1)));
    let ids =
        |x: &kvsim_core::fpm::artifact::RankArtifact| x.results.iter().map(|r| r.point.clone()).collect::<Vec<_>>();
    assert_eq!(ids(a), ids(b));
    assert_eq!(a.grid_digest, b.grid_digest);
}

#[test]
fn a_replayed_sweep_plan_reproduces_the_artifact_byte_for_byte() {
    let run = sweep(&find_scenario("gpt-oss-tp").unwrap(), None);
    let text = serde_json::to_string(&run.plan).unwrap();
    let plan = load_plan(&text).expect("a sweep plan is a valid plan");
    let replayed = artifacts_for(&plan, &run_plan(&plan)).unwrap();
    assert_eq!(
        serde_json::to_string(&replayed).unwrap(),
        serde_json::to_string(&run.artifacts).unwrap()
    );
}

#[test]
fn bad_scenarios_are_refused() {
    let mut s = find_scenario("gpt-oss-tp").unwrap();
    s.scenario.model.groups[1].sliding_window = Some(0);
    assert!(validate_scenario(&s).is_err());
    let mut s = find_scenario("llama31-8b").unwrap();
    s.scenario.pool_blocks = 100;
    assert!(validate_scenario(&s)
        .unwrap_err()
        .contains("smaller than one max_model_len request"));
    assert!(run_sweep(&find_scenario("llama31-8b").unwrap(), Some(Strategy::Native)).is_err());
    for s in builtin_scenarios() {
        validate_scenario(&s).unwrap();
    }
}
