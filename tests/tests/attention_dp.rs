//! FPM model II: attention data parallelism (dynamo_fpm.md §7). Ranks step in
//! lock-step on one shared plan derived from negotiated (minimum) capacity; the
//! grid is real-KV only (uncovered points dropped, `capacity_fallbacks` with
//! `benchmark_id: null`) with the same digest on every rank; a local failure on
//! one rank changes the plan only by group verdict, so every rank skips the same
//! points and PL-DP-LOCKSTEP holds.

use kvsim_core::engine::Engine;
use kvsim_core::fpm::artifact::RankArtifact;
use kvsim_core::fpm::capacity::LayoutNeed;
use kvsim_core::fpm::gate::Strategy;
use kvsim_core::fpm::scenarios::{find_scenario, BuiltinScenario};
use kvsim_core::fpm::sweep::{shadow_tail_blocks, SweepOptions};
use kvsim_core::plan::{FaultSpec, PlanOp};
use kvsim_sim::sweep::{run_sweep_with, SweepRun};
use kvsim_tests::schema::assert_valid_ser;

fn sweep(s: &BuiltinScenario, strategy: Strategy, faults: Vec<FaultSpec>) -> SweepRun {
    let opts = SweepOptions {
        faults,
        ..SweepOptions::default()
    };
    let run = run_sweep_with(s, Some(strategy), &opts, &mut |_, _| {}).unwrap_or_else(|e| panic!("{}: {e}", s.name));
    assert!(run.report.passed(), "{}: {:?}", s.name, run.report.outcome);
    assert_eq!(run.artifacts.len(), 2);
    assert_same_group_view(&run.artifacts[0], &run.artifacts[1]);
    for (rank, a) in run.artifacts.iter().enumerate() {
        assert_valid_ser("artifact", &format!("{} rank {rank}", s.name), a);
    }
    assert_valid_ser("plan", &s.name, &run.plan);
    run
}

/// Both ranks measured, skipped and numbered the same points on the same grid.
fn assert_same_group_view(a: &RankArtifact, b: &RankArtifact) {
    assert_eq!(a.grid_digest, b.grid_digest);
    let points = |x: &RankArtifact| x.results.iter().map(|r| r.point.clone()).collect::<Vec<_>>();
    assert_eq!(points(a), points(b));
    assert_eq!(a.skipped_points, b.skipped_points);
    assert_eq!(a.coverage, b.coverage);
    assert_eq!((a.dp["rank"].as_u64(), b.dp["rank"].as_u64()), (Some(0), Some(1)));
    for (x, rank) in [(a, 0), (b, 1)] {
        assert!(x.results.iter().all(|r| r.fpms[0].dp_rank == rank));
        // Real-KV only (§7.4): no fake point under attention DP.
        assert!(
            x.results.iter().all(|r| r.kv_seed_regime == "real_kv"),
            "{:?}",
            x.results.iter().map(|r| &r.kv_seed_regime).collect::<Vec<_>>()
        );
        assert!(x.kvwarm.capacity_fallbacks.iter().all(|f| f.benchmark_id.is_none()));
        // Contiguous 1-based ids after the drop.
        let mut ids: Vec<u64> = x.results.iter().map(|r| r.point.benchmark_id).collect();
        ids.extend(x.skipped_points.iter().map(|k| k["benchmark_id"].as_u64().unwrap()));
        ids.sort_unstable();
        assert_eq!(
            ids,
            (1..=x.coverage["expected_points"].as_u64().unwrap()).collect::<Vec<_>>()
        );
    }
}

fn deepseek_mla_dp2() -> BuiltinScenario {
    let mut s = find_scenario("deepseek-mla").unwrap();
    s.name = "deepseek-mla-dp2".into();
    s.scenario.name = "deepseek-mla-dp2".into();
    s.scenario.dp_ranks = 2;
    s
}

/// The first step of each point's shadow registration (rank 0's `register_shadow`).
fn registration_steps(run: &SweepRun) -> Vec<u64> {
    let mut v: Vec<u64> = run
        .plan
        .steps
        .iter()
        .filter(|st| st.rank == 0 && st.ops.iter().any(|op| matches!(op, PlanOp::RegisterShadow { .. })))
        .map(|st| st.step)
        .collect();
    v.dedup();
    v
}

#[test]
fn inkling_dp2_native_grid_is_real_kv_only_on_both_ranks() {
    let run = sweep(&find_scenario("inkling-tp4-dp2").unwrap(), Strategy::Native, vec![]);
    let a = &run.artifacts[0];
    assert_eq!(a.status, "complete");
    assert!(
        !a.kvwarm.capacity_fallbacks.is_empty(),
        "the over-pool point is dropped, not faked"
    );
    assert_eq!(a.coverage["completed_points"], a.coverage["expected_points"]);
}

#[test]
fn negotiated_capacity_is_the_minimum_over_ranks() {
    let s = find_scenario("inkling-tp4-dp2").unwrap();
    let base = sweep(&s, Strategy::Native, vec![]);
    // Rank 1's pool is 1200 blocks smaller from the start: both ranks plan against it.
    let small = sweep(
        &s,
        Strategy::Native,
        vec![FaultSpec::ShrinkPool {
            step: 0,
            rank: 1,
            blocks: 1200,
            steps: None,
        }],
    );
    let (b, m) = (&base.artifacts[0].kvwarm, &small.artifacts[0].kvwarm);
    assert!(m.capacity_fallbacks.len() > b.capacity_fallbacks.len());
    assert!(m.capacity_fallbacks.iter().all(|f| f.usable_blocks == 2999 - 1200));
    assert!(small.artifacts[0].results.len() < base.artifacts[0].results.len());
}

#[test]
fn deepseek_mla_dp2_sweeps_on_chains_on_both_ranks() {
    let run = sweep(&deepseek_mla_dp2(), Strategy::Chain, vec![]);
    let a = &run.artifacts[0];
    assert_eq!(a.status, "complete");
    assert!(a.results.len() >= 6);
    assert!(!a.kvwarm.stages.is_empty());
    // Each rank borrows its own chains (rank-specific salts, §7.2).
    let chains_of = |rank: u32| {
        run.plan
            .steps
            .iter()
            .filter(|st| st.rank == rank)
            .flat_map(|st| &st.ops)
            .filter_map(|op| match op {
                PlanOp::AddRequest { cache_salt, .. } => cache_salt.clone(),
                _ => None,
            })
            .filter(|s| s.starts_with("chain:"))
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert!(chains_of(0).is_disjoint(&chains_of(1)));
}

#[test]
fn a_stage_failure_on_one_rank_skips_the_point_on_every_rank() {
    let s = deepseek_mla_dp2();
    let base = sweep(&s, Strategy::Chain, vec![]);
    let steps = registration_steps(&base);
    let at = steps[steps.len() / 2];
    let run = sweep(
        &s,
        Strategy::Chain,
        vec![FaultSpec::StageFailure {
            step: at,
            rank: 1,
            after: 0,
        }],
    );
    let a = &run.artifacts[0];
    assert_eq!(a.skipped_points.len(), 1, "{:?}", a.skipped_points);
    assert_eq!(a.skipped_points[0]["reason"], "stage_failed_under_attention_dp");
    assert_eq!(a.results.len() + 1, base.artifacts[0].results.len());
    assert_eq!(a.status, "complete");
    // Rank 0 had registered its shadows: it retired them instead of injecting.
    let skipped = a.skipped_points[0]["benchmark_id"].as_u64().unwrap();
    let injected = run
        .plan
        .steps
        .iter()
        .flat_map(|st| &st.ops)
        .any(|op| matches!(op, PlanOp::InjectPoint { point, .. } if *point == skipped));
    assert!(!injected, "no rank injects a point the group skipped");
}

/// Rank `rank`'s free blocks after replaying the plan's steps before `step`.
fn free_blocks_before(run: &SweepRun, rank: u32, step: u64) -> u64 {
    let s = &run.plan.scenario;
    let mut e = Engine::new(s, rank).unwrap();
    let mut last = None;
    for st in run.plan.steps.iter().filter(|st| st.rank == rank && st.step < step) {
        if last != Some(st.step) {
            e.begin_step();
            last = Some(st.step);
        }
        for op in &st.ops {
            e.apply(op).unwrap();
        }
    }
    e.kv.pool.num_free_blocks() as u64
}

#[test]
fn a_smaller_pool_on_one_rank_fails_the_stage_by_group_verdict() {
    let s = deepseek_mla_dp2();
    let base = sweep(&s, Strategy::Chain, vec![]);
    // The second rung: its first build step, and its first registration step.
    let rank1_steps = |pred: &dyn Fn(&PlanOp) -> bool| -> Vec<u64> {
        base.plan
            .steps
            .iter()
            .filter(|st| st.rank == 1 && st.ops.iter().any(pred))
            .map(|st| st.step)
            .collect()
    };
    let build =
        rank1_steps(&|op| matches!(op, PlanOp::AddRequest { req, .. } if req.starts_with("kvwarm_chain.g2.")))[0];
    let register =
        rank1_steps(&|op| matches!(op, PlanOp::RegisterShadow { chain, .. } if chain.starts_with("kvwarm_chain.g2.")))
            [0];
    let batch = base.artifacts[1].kvwarm.stages[1]["batch"].as_u64().unwrap();
    let tails = shadow_tail_blocks(&LayoutNeed::new(s.scenario.kv_config()), s.bench.giant_kv_repeats) * batch;
    // Rank 1 loses blocks as the rung starts building: its fleet still fits, but
    // once parked it leaves one block too few for the rung's shadow tails (§7.3,
    // invariant 35). Rank 0 is healthy; the group verdict fails the stage on both.
    let parked_free = free_blocks_before(&base, 1, register);
    let shrink = parked_free - tails + 1;
    let run = sweep(
        &s,
        Strategy::Chain,
        vec![FaultSpec::ShrinkPool {
            step: build,
            rank: 1,
            blocks: shrink as u32,
            steps: None,
        }],
    );
    let a = &run.artifacts[0];
    // The second rung fails by the tail check; later rungs, whose fleets no longer
    // fit rank 1's smaller pool, fail locally during the build (also by verdict).
    let failed: Vec<u64> = a
        .kvwarm
        .stages
        .iter()
        .filter(|st| st["group_fallback"] == true)
        .map(|st| st["batch"].as_u64().unwrap())
        .collect();
    assert_eq!(failed.first(), Some(&batch), "{:?}", a.kvwarm.stages);
    assert_eq!(run.artifacts[1].kvwarm.stages, a.kvwarm.stages);
    let rung: Vec<u64> = base.artifacts[0]
        .results
        .iter()
        .filter(|r| failed.contains(&r.point.batch_size))
        .map(|r| r.point.benchmark_id)
        .collect();
    let skipped: Vec<u64> = a
        .skipped_points
        .iter()
        .map(|k| k["benchmark_id"].as_u64().unwrap())
        .collect();
    assert_eq!(skipped, rung, "every point of a failed rung is skipped, on every rank");
    assert!(a
        .skipped_points
        .iter()
        .all(|k| k["reason"] == "stage_failed_under_attention_dp"));
    assert_eq!(a.results.len() + skipped.len(), base.artifacts[0].results.len());
}

#[test]
fn a_single_rank_stage_failure_falls_back_to_synthetic_kv() {
    let s = find_scenario("deepseek-mla").unwrap();
    let opts = SweepOptions::default();
    let base = run_sweep_with(&s, Some(Strategy::Chain), &opts, &mut |_, _| {}).unwrap();
    let steps = registration_steps(&base);
    let opts = SweepOptions {
        faults: vec![FaultSpec::StageFailure {
            step: steps[1],
            rank: 0,
            after: 0,
        }],
        ..SweepOptions::default()
    };
    let run = run_sweep_with(&s, Some(Strategy::Chain), &opts, &mut |_, _| {}).unwrap();
    assert!(run.report.passed(), "{:?}", run.report.outcome);
    let count = |r: &SweepRun, regime: &str| {
        r.artifacts[0]
            .results
            .iter()
            .filter(|x| x.kv_seed_regime == regime)
            .count()
    };
    assert_eq!(count(&run, "real_kv") + 1, count(&base, "real_kv"));
    assert_eq!(count(&run, "fake_fallback"), count(&base, "fake_fallback") + 1);
}
