//! Every format's JSON Schema (`kvsim schema NAME`): a reviewed snapshot per schema
//! (`snapshots/schemas/`), the files kvsim writes valid against it, and every object of those
//! files closed: an unknown field or a value of the wrong type anywhere is rejected.
//!
//! Other suites validate what they write too (sweeps, check, cost model, exhaustive, the CLI's);
//! this one covers what no other suite writes and the negative cases.

use std::path::{Path, PathBuf};

use kvsim_cli::schemas::FORMATS;
use kvsim_core::fpm::scenarios::builtin_scenarios;
use kvsim_core::plan::load_plan;
use kvsim_sim::exec::run_plan;
use kvsim_tests::repo_root;
use kvsim_tests::schema::{assert_valid, assert_valid_file, closed_and_typed};
use serde_json::{json, Value};

fn json_files(dir: &str, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo_root().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no {suffix} in {dir}");
    v
}

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

// --- one snapshot test per schema ---------------------------------------------------------

fn snapshot_schema(name: &str) {
    let schema = kvsim_cli::schemas::find(name).unwrap().schema();
    let text = serde_json::to_string_pretty(&schema).unwrap();
    insta::with_settings!({snapshot_path => "../../snapshots/schemas", prepend_module_to_snapshot => false,
                           omit_expression => true}, {
        insta::assert_snapshot!(name, text);
    });
}

macro_rules! schema_snapshots {
    ($($test:ident => $name:literal),* $(,)?) => {
        $( #[test] fn $test() { snapshot_schema($name) } )*
        const SNAPSHOTTED: &[&str] = &[$($name),*];
    };
}

schema_snapshots! {
    schema_plan => "plan",
    schema_artifact => "artifact",
    schema_scenario => "scenario",
    schema_replay => "replay",
    schema_replay_gpu => "replay-gpu",
    schema_predict => "predict",
    schema_profile => "profile",
    schema_compare => "compare",
    schema_check => "check",
    schema_mutants => "mutants",
    schema_kvtrace => "kvtrace",
}

#[test]
fn every_format_has_its_snapshot_test_and_a_valid_draft7_schema() {
    let names: Vec<&str> = FORMATS.iter().map(|f| f.name).collect();
    assert_eq!(SNAPSHOTTED, names.as_slice());
    for f in FORMATS {
        // Checked against the draft-07 meta-schema.
        jsonschema::draft7::meta::validate(&f.schema()).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    }
}

// --- what kvsim writes validates ----------------------------------------------------------

#[test]
fn plans_that_load_validate() {
    let mut files = json_files("tests/data/plans", ".json");
    files.extend(json_files("docs/dynamo/findings", ".plan.json"));
    files.extend(json_files("docs/dynamo/swarm", ".plan.json"));
    files.extend(json_files("docs/gpu-mutant-replays", ".json"));
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        if load_plan(&text).is_ok() {
            assert_valid_file("plan", &f);
        }
    }
}

#[test]
fn scenario_files_validate() {
    for s in builtin_scenarios() {
        assert_valid("scenario", &s.name, &serde_json::to_value(&s).unwrap());
    }
    let mut files = json_files("tests/data/dynamo", ".json");
    files.extend(json_files("tests/data/dynamo/mutants", ".json"));
    files.extend(json_files("docs/dynamo/findings", ".scenario.json"));
    files.extend(json_files("docs/dynamo/swarm", ".scenario.json"));
    // The timing layouts every blind set was swept from (docs/timing.md reproduces them).
    let timing = json_files("docs/timing/scenarios", ".json");
    assert!(timing.len() >= 57, "{} timing scenario files", timing.len());
    files.extend(timing);
    for f in files {
        assert_valid_file("scenario", &f);
    }
}

/// The replay results of a passing plan, a violation and a mismatch.
fn replay_results() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for name in [
        "shadow_decode",
        "shadow_one_group",
        "bad_window_evicted",
        "native_full_swa",
    ] {
        let plan =
            load_plan(&std::fs::read_to_string(repo_root().join(format!("tests/data/plans/{name}.json"))).unwrap())
                .unwrap();
        out.push((name.to_string(), run_plan(&plan).to_json()));
    }
    // A mismatch: the recorded allocation differs from the model's.
    let mut mismatch = read(&repo_root().join("tests/data/plans/shadow_decode.json"));
    let first_schedule = mismatch["steps"][0]["ops"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|o| o["op"] == "schedule")
        .unwrap();
    first_schedule["expect"] = json!({"hit_tokens": 99});
    let plan = load_plan(&mismatch.to_string()).unwrap();
    out.push(("mismatch".into(), run_plan(&plan).to_json()));
    out
}

#[test]
fn replay_results_validate_passed_violation_and_mismatch() {
    let results = replay_results();
    let kinds: Vec<&str> = results
        .iter()
        .map(|(_, r)| r["outcome"]["result"].as_str().unwrap())
        .collect();
    for k in ["passed", "violation", "mismatch"] {
        assert!(kinds.contains(&k), "no {k} among {kinds:?}");
    }
    for (name, r) in &results {
        assert_valid("replay", name, r);
    }
}

#[test]
fn kvtraces_kvsim_generates_validate() {
    for i in 0..40 {
        let t = kvsim_core::kvtrace::gen::generate(7, i);
        assert_valid("kvtrace", &format!("generated trace {i}"), &t);
    }
    for f in json_files("tests/data/kvtrace_examples", ".json") {
        assert_valid_file("kvtrace", &f);
    }
}

#[test]
fn profiles_validate_the_builtin_and_the_calibrated() {
    let h200 = serde_json::to_value(kvsim_sim::cost::Profile::h200()).unwrap();
    assert_valid("profile", "h200", &h200);
    assert_valid_file(
        "profile",
        &repo_root().join("tests/data/profiles/h200-calibrated-s2.json"),
    );
    let committed = [
        "h200-calibrated",
        // Description version 6's recommended profile, and version 7's (and its calibration start).
        "h200-combine",
        "h200-experts",
        "h200-experts-start",
        // The H100 profiles each blind set from blind5 on was predicted with (issue 21).
        "h100-widest",
        "h100-walk",
        "h100-walk2",
        "h100-walk3",
        // write_kv's walk rate held at the per-op runs' figure (blind9's profile and its start).
        "h100-walk4",
        "h100-walk4-start",
        "h100-walk5",
        // fitted on one session's corpus (docs/timing/data/, blind12's profile).
        "h100-c1",
        // with the MoE walk's cold share (blind15's and blind16's).
        "h100-c2",
        // h100-c2's recipe with six calibration layouts of at most 24 experts (blind17's and
        // blind18's).
        "h100-c3",
        // the MoE GEMMs' per-SM form on h100-c3's files (blind19's and blind20's) and its start.
        "h100-c4",
        "h100-walk4-norm4-start",
    ];
    for name in committed {
        assert_valid_file("profile", &repo_root().join(format!("docs/timing/{name}.json")));
    }
}

// --- every object is closed and typed (kvsim_tests::schema::closed_and_typed) ---------------

#[test]
fn plans_reject_unknown_fields_and_wrong_types_in_every_object() {
    let sweep =
        kvsim_sim::sweep::run_sweep(&kvsim_core::fpm::scenarios::find_scenario("glm53-flash").unwrap(), None).unwrap();
    let sweep_plan = serde_json::to_value(&sweep.plan).unwrap();
    let (o, s) = closed_and_typed("plan", "a sweep plan", &sweep_plan);
    assert!(o >= 15 && s >= 60, "{o} objects, {s} scalars");
    for f in [
        "docs/dynamo/findings/pl-window.plan.json",
        "tests/data/plans/shadow_decode.json",
    ] {
        closed_and_typed("plan", f, &read(&repo_root().join(f)));
    }
}

#[test]
fn artifacts_reject_unknown_fields_and_wrong_types_in_every_object() {
    let run = kvsim_sim::sweep::run_sweep(
        &kvsim_core::fpm::scenarios::find_scenario("minimax-m27-ep").unwrap(),
        None,
    )
    .unwrap();
    let art = serde_json::to_value(&run.artifacts[0]).unwrap();
    let (o, s) = closed_and_typed("artifact", "minimax-m27-ep", &art);
    assert!(o > 20 && s > 80, "{o} objects, {s} scalars");
}

#[test]
fn scenarios_replays_profiles_and_kvtraces_reject_unknown_fields_and_wrong_types() {
    let s = serde_json::to_value(kvsim_core::fpm::scenarios::find_scenario("glm53-flash").unwrap()).unwrap();
    closed_and_typed("scenario", "glm53-flash", &s);
    for (name, r) in replay_results() {
        closed_and_typed("replay", &name, &r);
    }
    closed_and_typed(
        "profile",
        "h200-calibrated",
        &read(&repo_root().join("docs/timing/h200-calibrated.json")),
    );
    closed_and_typed("kvtrace", "generated", &kvsim_core::kvtrace::gen::generate(3, 5));
}

#[test]
fn check_reports_reject_unknown_fields_and_wrong_types_in_every_object() {
    use kvsim_sim::check::suite::{check, CheckConfig, ExhaustiveSummary, Failure};
    let base = kvsim_core::fpm::scenarios::find_scenario("glm53-flash").unwrap();
    let cfg = CheckConfig {
        seed: 1,
        cases: 1,
        shard: (1, 1),
        scenarios: vec![base.clone()],
        only: Some(0),
        jobs: 1,
    };
    let mut report = check(&cfg, &mut |_, _| {});
    // A report with every optional part: a failure (its case knobs and verdict) and the
    // exhaustive pass's summary.
    let spec = kvsim_sim::check::case::CaseSpec::draw(
        &mut <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(3),
        &base,
    );
    report.failures.push(Failure {
        case: 0,
        scenario: base.name.clone(),
        spec,
        verdict: kvsim_sim::check::run::Verdict::Violation {
            invariant: "KV-REF".into(),
            detail: "made up".into(),
        },
        original_ops: 10,
        shrunk_ops: 2,
        plan: None,
    });
    report.exhaustive = Some(ExhaustiveSummary {
        states: 1,
        sequences: "1".into(),
        depth: 1,
        violation: None,
        hybrid: kvsim_sim::check::suite::HybridSummary {
            states: 1,
            sequences: "1".into(),
            depth: 1,
            violation: None,
            fixed_point: Some("add a".into()),
        },
    });
    let (o, s) = closed_and_typed("check", "a check report", &serde_json::to_value(&report).unwrap());
    assert!(o >= 6 && s >= 25, "{o} objects, {s} scalars");
}

/// A GPU result as `src/cli/replay_gpu.rs` writes it, every optional part present: no GPU here,
/// so the sample is assembled from that writer's fields, with the parts kvsim computes without a
/// device (the cost description of a real plan, a simulator outcome) taken from real runs.
/// `tests/cli/replay_gpu_cli.rs` validates a real result where a GPU is.
fn gpu_result_sample() -> Value {
    let plan = kvsim_sim::sweep::run_sweep(&kvsim_core::fpm::scenarios::find_scenario("gpt-oss-tp").unwrap(), None)
        .unwrap()
        .plan;
    let (_, steps) = kvsim_sim::cost::describe_plan(
        &plan,
        &kvsim_sim::cost::Profile::h200(),
        &kvsim_sim::cost::RunOptions::default(),
    )
    .unwrap();
    let sim = replay_results()
        .into_iter()
        .find(|(_, r)| r["outcome"]["result"] == "violation")
        .unwrap()
        .1;
    let violation = json!({"step": 1, "rank": 0, "op_index": 3, "req": "r0", "group": 1, "block": 480,
        "position": 3568, "device_step": 1, "device_op": 4, "detail": "position 3568 reads stale content"});
    let mut v = json!({
        "format": "kvsim-replay/1", "backend": "gpu", "plan_hash": sim["plan_hash"],
        "outcome": {"result": "violation", "first": violation},
        "device": {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132, "l2_bytes": 62914560,
            "memory_bytes": 150_000_000_000u64, "driver_version": "580.159.04", "driver_cuda_version": "13.0",
            "nvrtc_version": "12.8"},
        "verification": {"passed": false, "rows_verified": 1024, "violations": [violation]},
        "simulator": {"outcome": sim["outcome"], "first_finding_step": 1, "first_finding_invariant": "PL-WINDOW",
            "violations_seen_while_lowering": [{"step": 1, "rank": 0, "op_index": 3, "invariant": "PL-WINDOW",
                "detail": "d"}]},
        "gpu_first_violation_step": 1,
        "steps": [{"step": 0, "device_us": 12.5, "device_us_range": [12.0, 13.0], "host_us": 30.0,
            "decode_kv_bytes": 4096, "kv_gbps": 0.3, "ops": [{"op": 0, "kind": "write_kv", "device_us": 2.5}]}],
        "points": [{"point": 1, "step_begin": 0, "step_end": 1, "device_us": 25.0, "device_us_runs": [25.0, 26.0],
            "host_us": 40.0, "wall_us": 70.0, "decode_kv_bytes": 4096, "kv_gbps": 0.2}],
        "bandwidth": {"decode_only_steps": 1, "decode_kv_bytes": 4096, "decode_steps_device_us": 12.5,
            "achieved_gbps": 0.3, "copy_gbps": 3900.0, "percent_of_copy": 0.01, "note": "n"},
        "layout": [{"rank": 0, "group": 0, "kind": "full_attention", "block_size": 16, "layers": 2, "kv_heads": 8,
            "q_heads": 64, "head_dim": 64, "blocks": 2000, "pool_bytes": 1_048_576, "kernel": "attn_mma (D 64, 4 heads/CTA)"}],
        "notes": ["a note"],
        "run": {"synthetic_kv": "tokens", "moe_input": "token", "time_ops": true, "sync_windows": true, "warmup": 1,
            "repeat": 3, "spin_wait": true, "warm_up_ms": 30},
        "cost": {"desc_version": kvsim_sim::cost::desc::DESC_VERSION, "sm_count": 132,
            "resident_ctas": {"attn_mma_d64_h4": 264}, "steps": steps},
        "ranks": {"ranks": 2, "devices": 1, "device_of_rank": [0, 0], "device_names": ["NVIDIA H200", "NVIDIA H200"],
            "exchange": "host", "lag_step_us": 100.0, "message_lag_steps": [0, 1], "exchange_verified": false,
            "exchange_mismatches": [{"step": 1, "rank": 0, "detail": "d"}],
            "steps": [{"step": 0, "rank_device_us": [12.5, 12.0], "rank_busy_us": [40.0, 140.0],
                "rank_lag_us": [0.0, 100.0], "rank_wait_us": [110.0, 10.0], "skew_us": 100.0, "exchange_us": 10.0}],
            "totals": {"max_skew_us": 100.0, "max_skew_step": 0, "exchange_us_median": 10.0, "rank_wait_us": [110.0, 10.0]},
            "note": "n"},
    });
    v["symptom"] = symptom_sample();
    v
}

/// `--against` on a PL-NO-POACH finding: the point's recorded time, its window and the
/// poaching prefill.
fn symptom_sample() -> Value {
    json!({"point": 3, "finding": {"invariant": "PL-NO-POACH", "step": 18, "detail": "d"},
        "failing": {"recorded_us": 40.0, "range_us": [39.0, 41.0], "how": "h", "windows": 3},
        "fixed": {"recorded_us": 40.5, "range_us": [40.0, 41.0], "how": "h", "windows": 3},
        "difference_us": -0.5, "difference_pct": -1.2, "spread_pct": 5.0, "observed": false,
        "window": {"ordinal": 0, "failing_us": 50.0, "failing_range_us": [49.0, 51.0], "fixed_us": 50.0,
            "fixed_range_us": [49.0, 51.0], "difference_us": 0.0, "difference_pct": 0.0, "spread_pct": 4.0,
            "observed": false},
        "prefill": {"request": "p3.r0.s0", "prompt_tokens": 4093, "hit_tokens": 112, "matched_by": "m",
            "failing": {"prompt_tokens_computed": 3981, "first_position": 112, "steps": [18, 19],
                "chunk_tokens": [2048, 1933], "step_tokens": [2048, 1933], "synthetic": [false, false],
                "us": 780.0, "range_us": [779.0, 781.0]},
            "fixed": {"prompt_tokens_computed": 4093, "first_position": 0, "steps": [18, 19],
                "chunk_tokens": [2048, 2045], "step_tokens": [2048, 2045], "synthetic": [false, false],
                "us": 800.0, "range_us": [799.0, 801.0]},
            "difference_us": -20.0, "difference_pct": -2.5, "spread_pct": 0.3, "observed": true,
            "finding_step": {"failing_us": 400.0, "failing_range_us": [399.0, 401.0], "fixed_us": 400.0,
                "fixed_range_us": [399.0, 401.0], "difference_us": 0.0, "difference_pct": 0.0, "spread_pct": 0.5,
                "observed": false},
            "timed_steps": [19]}})
}

#[test]
fn gpu_results_reject_unknown_fields_and_wrong_types_in_every_object() {
    let (o, s) = closed_and_typed("replay-gpu", "a GPU result", &gpu_result_sample());
    assert!(o >= 15 && s >= 60, "{o} objects, {s} scalars");
}

/// A plan with every op, fault and prompt source, each with its optional fields: schema-valid,
/// not meant to run.
fn every_variant_plan() -> Value {
    let ops = json!([
        {"op": "add_request", "req": "a", "prompt": {"source": "ids", "ids": [1, 2]}, "cache_salt": "s"},
        {"op": "add_request", "req": "b", "prompt": {"source": "salted", "salt": "x", "len": 8, "vocab": 100}},
        {"op": "add_request", "req": "c", "prompt": {"source": "py_choices", "seed": "3", "len": 8, "low": 0, "high": 100}},
        {"op": "schedule", "req": "a", "num_new_tokens": 2, "use_prefix_cache": true, "full_sequence_must_fit": true,
         "delay_cache_blocks": true, "expect": {"hit_tokens": 0, "tables": [[1]], "refused": true}},
        {"op": "forward", "batch": [{"req": "a", "tokens": 2, "output": [7]}]},
        {"op": "process_outputs", "lag": 1},
        {"op": "fake_compute", "req": "b", "tokens": 4},
        {"op": "cache_blocks", "req": "a", "num_tokens": 2},
        {"op": "finish", "req": "a", "fenced": true},
        {"op": "preempt", "req": "b"},
        {"op": "shed", "req": "c", "fenced": true},
        {"op": "register_shadow", "shadow": "s", "chain": "c", "ctx": 4, "headroom": 2, "tail": "cow",
         "groups": [{"shared": [1], "tail": [2, 3], "cow_from": 1, "cow_more": [4], "num_cached": 1}],
         "ok": true, "covered": true, "random_state": true},
        {"op": "release_cow"},
        {"op": "zero_blocks", "group": 0, "blocks": [2]},
        {"op": "copy_block", "group": 0, "src": 1, "dst": 2},
        {"op": "reset_prefix_cache", "expect": true},
        {"op": "begin_timed", "point": 1},
        {"op": "end_timed", "point": 1},
        {"op": "inject_point", "point": 1, "replica": true},
        {"op": "host_work", "label": "register"},
        {"op": "observe", "free_blocks": 10, "free_head": [3, 4], "live": 1, "tables": {"a": [[1, 2]]},
         "gone": ["b"], "runner_mismatch": "differs", "unmodelled": ["edit"]},
        {"op": "planner_failed", "kind": "raised", "error": "KeyError"},
        {"op": "end_sweep"},
    ]);
    let faults = json!([
        {"fault": "soft_timeout", "step": 1},
        {"fault": "abort", "step": 1, "rank": 0, "req": "a", "fenced": true},
        {"fault": "shrink_pool", "step": 0, "rank": 1, "blocks": 4, "steps": 2},
        {"fault": "delay_outputs", "step": 1, "rank": 0, "by": 2},
        {"fault": "stage_failure", "step": 1, "rank": 0, "after": 1},
        {"fault": "message_lag", "rank": 1, "steps": 1},
    ]);
    let mut plan = kvsim_tests::plan(
        kvsim_tests::scenario(Some(8), 2, 64),
        vec![(0, 0, ops.as_array().unwrap().clone())],
    );
    plan["faults"] = faults;
    plan["scenario"]["model"]["experts"] = json!(8);
    plan["scenario"]["model"]["top_k"] = json!(2);
    plan["scenario"]["model"]["groups"].as_array_mut().unwrap().push(
        json!({"kind": "chunked_local", "attention_chunk_size": 8, "block_size": 4, "layers": 1, "kv_heads": 1, "head_dim": 8}),
    );
    plan["scenario"]["scheduler"]["async_scheduling"] = json!(true);
    plan["scenario"]["scheduler"]["watermark"] = json!(0.01);
    plan["source"] = json!({"planner": "dynamo", "version": "1.6.1", "vllm": "0.31.0", "source_sha256": "ab",
        "installed": false, "points": [{"point": 1, "step": 3, "batch": 1, "context_lengths": [4], "kind": "shadow",
        "rank": 1, "replica": true}]});
    plan
}

/// The `enum` values of a tagged enum's variants in a schema's definitions.
fn variants(schema: &Value, def: &str, tag: &str) -> std::collections::BTreeSet<String> {
    schema["definitions"][def]["oneOf"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["properties"][tag]["enum"].as_array().unwrap().iter())
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn every_plan_op_fault_and_prompt_rejects_unknown_fields_and_wrong_types() {
    let plan = every_variant_plan();
    let schema = kvsim_cli::schemas::find("plan").unwrap().schema();
    let seen = |key: &str, within: &Value| -> std::collections::BTreeSet<String> {
        within
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x[key].as_str().unwrap().to_string())
            .collect()
    };
    // The sample has every variant the schema knows: a new op needs its sample here.
    assert_eq!(seen("op", &plan["steps"][0]["ops"]), variants(&schema, "PlanOp", "op"));
    assert_eq!(seen("fault", &plan["faults"]), variants(&schema, "FaultSpec", "fault"));
    let prompts: Vec<Value> = plan["steps"][0]["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o.get("prompt").cloned())
        .collect();
    assert_eq!(
        seen("source", &Value::Array(prompts)),
        variants(&schema, "Tokens", "source")
    );
    let (o, s) = closed_and_typed("plan", "every variant", &plan);
    assert!(o >= 40 && s >= 100, "{o} objects, {s} scalars");
}
