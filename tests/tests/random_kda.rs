//! FPM model II: random KDA (dynamo_fpm.md §3, §5.1, §5.2, §8.1 invariant 49).
//! With `random_kda` on, glm53-flash (a Mamba/KDA state group) is chain-eligible;
//! shadows borrow the attention prefix and hold private, deterministic random
//! recurrent state over `recurrent_shadow_range`, never the chain's state.

use kvsim_core::fpm::gate::{gate, Strategy};
use kvsim_core::fpm::scenarios::{find_scenario, BuiltinScenario};
use kvsim_core::fpm::sweep::recurrent_shadow_range;
use kvsim_core::plan::{GroupKindName, PlanOp};
use kvsim_sim::sweep::{run_sweep, SweepRun};
use kvsim_tests::schema::assert_valid_ser;

fn glm_random_kda() -> BuiltinScenario {
    let mut s = find_scenario("glm53-flash").unwrap();
    s.bench.random_kda = true;
    s
}

fn sweep(s: &BuiltinScenario) -> SweepRun {
    let run = run_sweep(s, Some(Strategy::Chain)).unwrap_or_else(|e| panic!("{e}"));
    assert!(run.report.passed(), "{:?}", run.report.outcome);
    for (rank, a) in run.artifacts.iter().enumerate() {
        assert_valid_ser("artifact", &format!("{} rank {rank}", s.name), a);
    }
    assert_valid_ser("plan", &s.name, &run.plan);
    run
}

#[test]
fn random_kda_makes_the_hybrid_model_chain_eligible() {
    let plain = find_scenario("glm53-flash").unwrap();
    assert!(!gate(&plain).chain);
    let v = gate(&glm_random_kda());
    assert!(v.chain && !v.native, "{v:?}");
}

#[test]
fn glm53_flash_with_random_kda_sweeps_on_chains_with_private_random_state() {
    let s = glm_random_kda();
    let run = sweep(&s);
    let a = &run.artifacts[0];
    assert_eq!(a.kvwarm.initialization_strategy.as_deref(), Some("shared_prefix_chain"));
    assert_eq!(a.recurrent_state["initialization"], "random");
    let real = a
        .results
        .iter()
        .filter(|r| r.kv_seed_regime == "real_attention_kv_random_kda")
        .count();
    assert!(real >= 4, "{real} random-KDA real rows");
    assert!(a
        .results
        .iter()
        .all(|r| r.kv_seed_regime == "real_attention_kv_random_kda"
            || r.kv_seed_regime == "fake_attention_kv_random_kda"));
    assert_eq!(a.kvwarm.points_real_kv, real as u64);
    // Invariant 49: the state group's span is private (null placeholders below,
    // fresh blocks over recurrent_shadow_range), nothing shared, no CoW source.
    let state = s
        .scenario
        .model
        .groups
        .iter()
        .position(|g| g.kind == GroupKindName::Mamba)
        .unwrap();
    let bs = s.scenario.model.groups[state].block_size;
    let mut seen = 0;
    for op in run.plan.steps.iter().flat_map(|st| &st.ops) {
        if let PlanOp::RegisterShadow {
            ctx,
            headroom,
            groups,
            ok: true,
            random_state,
            ..
        } = op
        {
            assert!(random_state);
            let g = &groups[state];
            let (first, end) = recurrent_shadow_range(*ctx, *headroom, bs);
            assert_eq!(g.shared, vec![0; first as usize]);
            assert_eq!(g.tail.len() as u64, end - first);
            assert!(g.cow_from.is_none());
            seen += 1;
        }
    }
    assert!(seen > 0);
}

#[test]
fn random_kda_sweeps_are_deterministic() {
    let s = glm_random_kda();
    let (a, b) = (sweep(&s), sweep(&s));
    assert_eq!(
        serde_json::to_string(&a.artifacts).unwrap(),
        serde_json::to_string(&b.artifacts).unwrap()
    );
}

#[test]
fn a_shadow_that_does_not_hold_its_random_state_is_caught() {
    let run = sweep(&glm_random_kda());
    let mut plan = run.plan.clone();
    let op = plan
        .steps
        .iter_mut()
        .flat_map(|st| st.ops.iter_mut())
        .find(|op| matches!(op, PlanOp::RegisterShadow { ok: true, .. }))
        .unwrap();
    // Without the random fill the state group's tail is only zeroed: the shadow's
    // first read of its recurrent state finds neither the chain's nor random state.
    if let PlanOp::RegisterShadow { random_state, .. } = op {
        *random_state = false;
    }
    let report = kvsim_sim::exec::run_plan(&plan);
    match &report.outcome {
        kvsim_sim::exec::Outcome::Violation(f) => assert_eq!(f.invariant.as_deref(), Some("PL-WINDOW"), "{f:?}"),
        other => panic!("{other:?}"),
    }
}
