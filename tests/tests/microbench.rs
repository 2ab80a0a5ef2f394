//! The kernel microbenchmark suite (issue 21 item 2, docs/timing.md "Kernel microbenchmarks"):
//! its plans cover every kernel family the cost model prices, over the axes it was designed
//! for; `kvsim microbench plans` writes them with a manifest whose hashes match; bad input
//! exits 2 and writes nothing.

use std::collections::BTreeSet;
use std::path::PathBuf;

use kvsim_core::fpm::planner;
use kvsim_core::fpm::sweep::{load_plan_checked, SweepOptions};
use kvsim_sim::cost::desc::OpDesc;
use kvsim_sim::cost::families::op_family;
use kvsim_sim::cost::microbench::suite;
use kvsim_sim::cost::{describe_plan, Profile, RunOptions};
use kvsim_sim::exec::{plan_hash, run_plan, Outcome};
use kvsim_sim::sweep::run_sweep_checked;
use kvsim_tests::run_cli as kvsim;
use serde_json::Value;

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("kvsim-microbench-{}-{name}", std::process::id()))
}

#[test]
fn the_suite_covers_every_kernel_family_over_its_axes() {
    let mut families = BTreeSet::new();
    let mut moe_shapes = BTreeSet::new();
    let mut head_dims = BTreeSet::new();
    let (mut max_serial, mut max_moe_tokens, mut max_positions) = (0u64, 0u64, 0u64);
    for e in suite() {
        let strategy = planner::by_name(e.strategy).unwrap().map(|p| p.strategy());
        let sweep = run_sweep_checked(
            &e.scenario,
            strategy,
            &SweepOptions::default(),
            kvsim_sim::exec::RunOptions::default(),
            &mut |_, _| {},
        )
        .unwrap();
        assert!(matches!(sweep.report.outcome, Outcome::Passed), "{}", e.name);
        let (_, steps) = describe_plan(&sweep.plan, &Profile::h200(), &RunOptions::default()).unwrap();
        for op in steps.iter().flat_map(|s| &s.ops) {
            if let Some(f) = op_family(op) {
                families.insert(f);
            }
            match op {
                OpDesc::StateUpdate { serial, .. } => max_serial = max_serial.max(*serial),
                OpDesc::Moe {
                    tokens, experts, top_k, ..
                } => {
                    moe_shapes.insert((*experts, *top_k));
                    max_moe_tokens = max_moe_tokens.max(*tokens);
                }
                OpDesc::Decode { launches } => {
                    for l in launches {
                        head_dims.insert(l.head_dim);
                        max_positions = max_positions.max(u64::from(l.nsplit) * u64::from(l.split_tokens));
                    }
                }
                _ => {}
            }
        }
    }
    for f in [
        "decode mma",
        "decode generic",
        "decode latent_mma",
        "moe",
        "write_kv",
        "write_kv latent",
        "state_update",
        "zero_blocks",
        "copy_blocks",
    ] {
        assert!(families.contains(f), "no {f} in {families:?}");
    }
    assert!(moe_shapes.len() >= 10, "MoE (experts, top-k): {moe_shapes:?}");
    let experts: BTreeSet<u32> = moe_shapes.iter().map(|s| s.0).collect();
    assert!(
        experts.first() <= Some(&8) && experts.last() >= Some(&256),
        "{experts:?}"
    );
    assert!(head_dims.len() >= 5, "head dims {head_dims:?}");
    assert!(max_serial >= 8192, "state updates up to serial {max_serial}");
    assert!(max_moe_tokens >= 4096, "MoE up to {max_moe_tokens} tokens");
    assert!(max_positions >= 8192, "decodes up to {max_positions} positions");
}

#[test]
fn plans_are_written_with_a_manifest_whose_hashes_match() {
    let dir = tmp("plans");
    let d = dir.to_str().unwrap();
    assert_eq!(
        kvsim(&[
            "microbench",
            "plans",
            "--out-dir",
            d,
            "--only",
            "attn-d64-kv1,moe-collapsed"
        ])
        .unwrap(),
        0
    );
    let manifest: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["format"], "kvsim-microbench/1");
    let entries = manifest["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1]["replay"], "collapsed_routing");
    for e in entries {
        let text = std::fs::read_to_string(dir.join(e["plan"].as_str().unwrap())).unwrap();
        let plan = load_plan_checked(&text).unwrap();
        assert_eq!(e["plan_hash"], plan_hash(&plan));
        assert!(matches!(run_plan(&plan).outcome, Outcome::Passed));
        assert!(dir.join(e["scenario"].as_str().unwrap()).exists());
    }
    // Deterministic: a second run writes the same bytes.
    let first = std::fs::read(dir.join("attn-d64-kv1.plan.json")).unwrap();
    let again = tmp("plans-again");
    kvsim(&[
        "microbench",
        "plans",
        "--out-dir",
        again.to_str().unwrap(),
        "--only",
        "attn-d64-kv1",
    ])
    .unwrap();
    assert_eq!(first, std::fs::read(again.join("attn-d64-kv1.plan.json")).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&again).unwrap();
}

#[test]
fn bad_input_exits_2_and_writes_nothing() {
    let dir = tmp("bad");
    let d = dir.to_str().unwrap();
    let err = kvsim(&["microbench", "plans", "--out-dir", d, "--only", "attn-d64-kv1,nope"]).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("nope"), "{err}");
    assert!(!dir.exists(), "nothing written for bad input");
    // `run` on a directory without a manifest (or without a device): exit 2.
    let err = kvsim(&["microbench", "run", d, "--out-dir", tmp("bad-out").to_str().unwrap()]).unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    assert!(!tmp("bad-out").exists());
}
