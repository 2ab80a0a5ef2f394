//! FPM model II: shared-prefix chains with shadows (dynamo_fpm.md §3). Chain-
//! eligible scenarios sweep under `--strategy chain` with every invariant holding,
//! shadows register all-or-nothing, and nothing stays referenced after a sweep.

use kvsim_core::engine::Engine;
use kvsim_core::fpm::gate::{gate, Strategy};
use kvsim_core::fpm::scenarios::{builtin_scenarios, find_scenario};
use kvsim_core::fpm::sweep::{plan_sweep, shadow_registration};
use kvsim_core::plan::{PlanOp, Scenario, Tokens};
use kvsim_sim::sweep::{run_sweep, SweepRun};
use serde_json::json;

fn chain_sweep(name: &str, strategy: Option<Strategy>) -> SweepRun {
    let s = find_scenario(name).unwrap();
    let run = run_sweep(&s, strategy).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(run.report.passed(), "{name}: {:?}", run.report.outcome);
    let k = &run.artifacts[0].kvwarm;
    assert_eq!(k.initialization_strategy.as_deref(), Some("shared_prefix_chain"));
    let rows = &run.artifacts[0].results;
    let real = rows.iter().filter(|r| r.kv_seed_regime == "real_kv").count();
    assert!(real >= 6, "{name}: only {real} real-KV rows");
    assert!(rows
        .iter()
        .all(|r| r.kv_seed_regime == "real_kv" || r.kv_seed_regime == "fake_fallback"));
    assert!(!k.stages.is_empty());
    // Each deeper generation hits the previous one in the prefix cache and computes
    // only the extension: far fewer prefill tokens than rebuilding every stage.
    let rebuild: u64 = k
        .stages
        .iter()
        .map(|s| s["batch"].as_u64().unwrap() * s["depth"].as_u64().unwrap())
        .sum();
    assert!(
        k.untimed_prefill_tokens < rebuild,
        "{name}: {} vs {rebuild}",
        k.untimed_prefill_tokens
    );
    assert_no_block_referenced_after(&run);
    run
}

/// Replay the sweep's plan on plain engines: after it no block is referenced and
/// the prefix cache is empty.
fn assert_no_block_referenced_after(run: &SweepRun) {
    let s = &run.plan.scenario;
    let mut engines: Vec<Engine> = (0..s.dp_ranks).map(|r| Engine::new(s, r).unwrap()).collect();
    let mut by_step = std::collections::BTreeMap::<u64, Vec<&kvsim_core::plan::Step>>::new();
    for st in &run.plan.steps {
        by_step.entry(st.step).or_default().push(st);
    }
    for steps in by_step.values() {
        engines.iter_mut().for_each(Engine::begin_step);
        for st in steps {
            for op in &st.ops {
                engines[st.rank as usize].apply(op).unwrap();
            }
        }
    }
    for e in &engines {
        let held: Vec<u32> = (1..e.kv.pool.num_blocks())
            .filter(|&b| e.kv.pool.ref_cnt(b) > 0)
            .collect();
        assert!(
            held.is_empty(),
            "blocks still referenced: {:?}",
            &held[..held.len().min(8)]
        );
        assert_eq!(e.kv.pool.num_cached_keys(), 0);
        assert!(e.requests.is_empty() && e.deferred.is_empty() && e.cow_retained.is_empty());
    }
}

#[test]
fn deepseek_mla_sweeps_on_shared_prefix_chains() {
    let run = chain_sweep("deepseek-mla", Some(Strategy::Chain));
    // A rung whose chains and tails do not fit falls back with a capacity entry.
    let k = &run.artifacts[0].kvwarm;
    for f in &k.capacity_fallbacks {
        assert!(f.required_blocks > f.usable_blocks);
        let row = run.artifacts[0]
            .results
            .iter()
            .find(|r| Some(r.point.benchmark_id) == f.benchmark_id);
        if let Some(row) = row {
            assert_eq!(row.kv_seed_regime, "fake_fallback");
        }
    }
    // Shadows copy-on-write the chain's partial tail block when ctx is not block-aligned.
    let cow = run
        .plan
        .steps
        .iter()
        .flat_map(|s| &s.ops)
        .filter(|op| matches!(op, PlanOp::RegisterShadow { groups, .. } if groups.iter().any(|g| g.cow_from.is_some())))
        .count();
    assert!(cow > 0);
}

#[test]
fn minimax_m27_ep_sweeps_on_shared_prefix_chains() {
    let t = std::time::Instant::now();
    chain_sweep("minimax-m27-ep", Some(Strategy::Chain));
    eprintln!("minimax-m27-ep chain sweep: {:.2} s", t.elapsed().as_secs_f64());
}

#[test]
fn auto_picks_chains_for_chain_eligible_scenarios_and_refuses_others() {
    chain_sweep("deepseek-mla", None);
    for s in builtin_scenarios() {
        if !gate(&s).chain {
            assert!(plan_sweep(&s, Some(Strategy::Chain)).is_err(), "{}", s.name);
        }
    }
}

/// Two positional groups (full attention bs 4, MLA bs 8) and a small pool.
fn two_group_scenario(pool_blocks: u32) -> Scenario {
    let mut v = kvsim_tests::scenario(None, 1, pool_blocks);
    v["model"]["groups"] = json!([
        {"kind": "full_attention", "block_size": 4, "layers": 2, "kv_heads": 2, "head_dim": 8},
        {"kind": "mla", "block_size": 8, "layers": 2, "kv_heads": 1, "head_dim": 8}
    ]);
    serde_json::from_value(v).unwrap()
}

fn apply(e: &mut Engine, op: PlanOp) {
    let out = e.apply(&op).unwrap_or_else(|m| panic!("{op:?}: {m}"));
    assert!(out.violations.is_empty(), "{:?}", out.violations);
}

/// An engine with a parked 24-token chain `c` and `filler` holding blocks.
fn engine_with_chain(filler_tokens: u64) -> Engine {
    let s = two_group_scenario(32);
    let mut e = Engine::new(&s, 0).unwrap();
    e.begin_step();
    for (req, len) in [("c", 24), ("filler", filler_tokens)] {
        apply(
            &mut e,
            PlanOp::AddRequest {
                req: req.into(),
                prompt: Tokens::Salted {
                    salt: req.into(),
                    len,
                    vocab: 100,
                },
                cache_salt: Some(req.into()),
            },
        );
        apply(
            &mut e,
            PlanOp::Schedule {
                req: req.into(),
                num_new_tokens: len,
                use_prefix_cache: true,
                full_sequence_must_fit: true,
                delay_cache_blocks: false,
                expect: Default::default(),
            },
        );
    }
    apply(
        &mut e,
        PlanOp::Forward {
            batch: vec![kvsim_core::plan::BatchEntry {
                req: "c".into(),
                tokens: 24,
                output: vec![1],
            }],
        },
    );
    apply(&mut e, PlanOp::ProcessOutputs { lag: 0 });
    e.begin_step();
    e
}

fn pool_state(e: &Engine) -> (usize, Vec<u32>, Vec<u32>) {
    let refs = (0..e.kv.pool.num_blocks()).map(|b| e.kv.pool.ref_cnt(b)).collect();
    (e.kv.pool.num_free_blocks(), e.kv.pool.free_queue().collect(), refs)
}

#[test]
fn shadow_registration_is_all_or_nothing() {
    // ctx 13, headroom 3: group 0 (bs 4) tail = ceil(17/4) − 3 = 2 blocks, group 1
    // (bs 8) tail = ceil(17/8) − 1 = 2 blocks: 4 in all. 31 usable blocks: the chain
    // holds 6 + 3, a 36-token filler 9 + 5 and a 16-token one 4 + 2, leaving 2 free:
    // the first group's tail fits, the last group's does not.
    let mut e = engine_with_chain(36);
    apply(
        &mut e,
        PlanOp::AddRequest {
            req: "more".into(),
            prompt: Tokens::Salted {
                salt: "more".into(),
                len: 16,
                vocab: 100,
            },
            cache_salt: Some("more".into()),
        },
    );
    apply(
        &mut e,
        PlanOp::Schedule {
            req: "more".into(),
            num_new_tokens: 16,
            use_prefix_cache: true,
            full_sequence_must_fit: true,
            delay_cache_blocks: false,
            expect: Default::default(),
        },
    );
    let free = e.kv.pool.num_free_blocks();
    assert!(
        (2..4).contains(&free),
        "{free} free blocks: the first group's tail fits, both do not"
    );
    let before = pool_state(&e);
    let op = shadow_registration(&e, "s", "c", 13, 3, true);
    assert!(
        matches!(&op, PlanOp::RegisterShadow { ok: false, groups, .. } if groups.is_empty()),
        "{op:?}"
    );
    // A failed registration that was not planned as covered passes and changes nothing.
    let op = shadow_registration(&e, "s", "c", 13, 3, false);
    apply(&mut e, op);
    assert_eq!(pool_state(&e), before, "the pool is exactly as before");
    assert!(!e.requests.contains_key("s"));

    // With the filler gone (fence drained) the same registration succeeds in every group.
    apply(
        &mut e,
        PlanOp::Finish {
            req: "more".into(),
            fenced: false,
        },
    );
    let op = shadow_registration(&e, "s", "c", 13, 3, true);
    let PlanOp::RegisterShadow { ok, groups, .. } = &op else {
        unreachable!()
    };
    assert!(*ok);
    assert_eq!(groups.len(), 2);
    assert!(groups.iter().all(|g| g.tail.len() == 2 && g.cow_from.is_some()));
    apply(&mut e, op);
    apply(&mut e, PlanOp::ReleaseCow);
    assert!(e.requests.contains_key("s"));
}
