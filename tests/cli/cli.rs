//! The `kvsim` binary end to end: byte-exact output and exit codes on bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::schema::assert_valid_file;

fn kvsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(args)
        .output()
        .expect("kvsim runs")
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn tmp_file(name: &str, body: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kvsim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn trace_prints_the_vllm_observations_byte_for_byte() {
    for name in ["golden_prefill", "golden_hybrid", "mamba_same_step", "chunked_null_hit"] {
        let trace = data(&format!("kvtrace_examples/{name}.json"));
        let out = kvsim(&["trace", trace.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0));
        let expected = std::fs::read(trace.with_extension("obs.jsonl")).unwrap();
        assert_eq!(out.stdout, expected, "{name}");
    }
}

#[test]
fn malformed_json_and_wrong_format_exit_2_with_a_message() {
    for (name, body, needle) in [
        ("bad.json", "{not json", "not valid JSON"),
        (
            "fmt.json",
            r#"{"format":"kvtrace/2","config":{},"ops":[]}"#,
            "format must be",
        ),
        (
            "ops.json",
            r#"{"format":"kvtrace/1","config":{},"ops":3}"#,
            "\"ops\" must be a list",
        ),
        ("arr.json", "[1,2]", "top level must be an object"),
    ] {
        let out = kvsim(&["trace", tmp_file(name, body).to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
    }
    let out = kvsim(&["trace", "/nonexistent/trace.json"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn impossible_config_and_invalid_ops_are_answered_as_format_md_says() {
    let cfg = r#"{"num_blocks":10,"enable_caching":true,"max_model_len":64,"block_size":4,"groups":[{"kind":"full_attention"}]}"#;
    let bad_cfg = r#"{"num_blocks":-3,"enable_caching":true,"max_model_len":64,"block_size":4,"groups":[{"kind":"full_attention"}]}"#;
    let cases = [
        (bad_cfg, "[]", "\"error\":\"ConfigError\""),
        (
            cfg,
            r#"[{"op":"add_request","id":"a","prompt":[1]},{"op":"add_request","id":"a","prompt":[2]}]"#,
            "\"error\":\"InvalidOp\"",
        ),
        (cfg, r#"[{"op":"free","id":"ghost"}]"#, "\"error\":\"InvalidOp\""),
        (
            cfg,
            r#"[{"op":"add_request","id":"a","prompt":[1,-2]}]"#,
            "\"error\":\"InvalidOp\"",
        ),
    ];
    for (k, (config, ops, needle)) in cases.iter().enumerate() {
        let body = format!(r#"{{"format":"kvtrace/1","config":{config},"ops":{ops}}}"#);
        let out = kvsim(&["trace", tmp_file(&format!("case{k}.json"), &body).to_str().unwrap()]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "case {k}: {stdout}");
        let last = stdout.lines().last().unwrap();
        assert!(last.contains(needle), "case {k}: {last}");
        // Replay stops at the error: nothing follows the error line.
        assert!(stdout.lines().filter(|l| l.contains("\"error\"")).count() == 1);
    }
}

#[test]
fn replay_exit_codes_and_outputs() {
    let dir = std::env::temp_dir().join(format!("kvsim-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("result.json");
    let good = data("plans/shadow_decode.json");
    let r = kvsim(&["replay", good.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stdout));
    let first = std::fs::read(&out).unwrap();
    assert_valid_file("replay", &out);
    kvsim(&["replay", good.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(std::fs::read(&out).unwrap(), first, "same plan, same bytes");
    let bad = data("plans/shadow_one_group.json");
    let r = kvsim(&["replay", bad.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stdout).contains("PL-SHADOW-ATOMIC"));
    assert_valid_file("replay", &out);
    // Malformed: an unknown field, with its JSON path; nothing is written.
    let text = std::fs::read_to_string(&good)
        .unwrap()
        .replacen("\"headroom\"", "\"headrom\"", 1);
    let broken = tmp_file("broken_plan.json", &text);
    let out2 = dir.join("never.json");
    let r = kvsim(&["replay", broken.to_str().unwrap(), "--out", out2.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(err.contains("$.steps[1].ops[0]") && err.contains("headrom"), "{err}");
    assert!(!out2.exists(), "nothing half-written is left behind");
}

#[test]
fn schema_plan_prints_a_json_schema() {
    let r = kvsim(&["schema", "plan"]);
    assert_eq!(r.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["title"], "Plan");
    assert!(v["definitions"]["PlanOp"].is_object());
}

#[test]
fn schema_list_names_every_format_and_each_prints_its_schema() {
    let r = kvsim(&["schema", "--list"]);
    assert_eq!(r.status.code(), Some(0));
    let text = String::from_utf8_lossy(&r.stdout).into_owned();
    let names: Vec<&str> = text.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "plan",
            "artifact",
            "scenario",
            "replay",
            "replay-gpu",
            "predict",
            "profile",
            "compare",
            "check",
            "mutants",
            "kvtrace"
        ]
    );
    assert!(text.lines().all(|l| l.split_whitespace().count() > 3), "{text}");
    for name in names {
        let r = kvsim(&["schema", name]);
        assert_eq!(r.status.code(), Some(0), "{name}");
        let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
        assert_eq!(v["$schema"], "http://json-schema.org/draft-07/schema#", "{name}");
        assert_eq!(v["additionalProperties"], false, "{name}: the top level is closed");
    }
    let r = kvsim(&["schema", "nope"]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(
        err.contains("unknown format \"nope\"; formats: plan, artifact,"),
        "{err}"
    );
    assert_eq!(kvsim(&["schema"]).status.code(), Some(2));
}

#[test]
fn unknown_subcommands_and_flags_exit_2() {
    assert_eq!(kvsim(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        kvsim(&["replay", "x.json", "--out", "y", "--backend", "quantum"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn scenarios_lists_one_a_line_name_first() {
    let r = kvsim(&["scenarios"]);
    assert_eq!(r.status.code(), Some(0));
    let text = String::from_utf8(r.stdout).unwrap();
    let names: Vec<&str> = text.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "inkling-tp4",
            "glm53-flash",
            "minimax-m27-ep",
            "llama31-8b",
            "gpt-oss-tp",
            "deepseek-mla",
            "inkling-tp4-dp2"
        ]
    );
}

#[test]
fn sweep_rejects_bad_scenarios_and_flags_with_exit_2() {
    let dir = std::env::temp_dir().join(format!("kvsim-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("a.json");
    let o = out.to_str().unwrap();
    for args in [
        vec!["sweep", "--scenario", "no-such-model", "--out", o],
        vec!["sweep", "--scenario", "llama31-8b", "--strategy", "magic", "--out", o],
        vec!["sweep", "--scenario", "llama31-8b", "--strategy", "native", "--out", o],
    ] {
        let r = kvsim(&args);
        assert_eq!(
            r.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(!String::from_utf8_lossy(&r.stderr).contains("panicked"));
    }
    let scenario = |window: i64, pool: u32| {
        format!(
            r#"{{"name": "custom", "scenario": {{"name": "custom",
              "model": {{"groups": [{{"kind": "full_attention", "block_size": 16, "layers": 2, "kv_heads": 2, "head_dim": 64}},
                                  {{"kind": "sliding_window", "sliding_window": {window}, "block_size": 16, "layers": 2, "kv_heads": 2, "head_dim": 64}}],
                        "experts": 8, "top_k": 2, "vocab_size": 1000}},
              "pool_blocks": {pool}, "scheduler": {{"max_num_seqs": 8, "max_num_batched_tokens": 256, "max_model_len": 1024, "enable_caching": true}},
              "dp_ranks": 1, "seed": 1}},
              "bench": {{"mode": "decode", "expert_parallel": false, "random_kda": false, "decode_capture_sizes": [1, 2],
                        "samples": {{"decode_max_batch_size_samples": 2, "decode_max_kv_read_token_samples": 2}},
                        "giant_kv_threshold": 1000000, "giant_kv_repeats": 3, "timeout_seconds": 900}}}}"#
        )
    };
    for (name, body, needle) in [
        ("window0.json", scenario(0, 400), "sliding_window"),
        ("negative.json", scenario(-4, 400), "sliding_window"),
        (
            "tinypool.json",
            scenario(8, 40),
            "smaller than one max_model_len request",
        ),
    ] {
        let f = tmp_file(name, &body);
        let r = kvsim(&["sweep", "--scenario-file", f.to_str().unwrap(), "--out", o]);
        assert_eq!(r.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains(needle), "{name}: {err}");
    }
    assert!(!out.exists(), "nothing written on refusal");
    let good = tmp_file("good.json", &scenario(8, 400));
    let r = kvsim(&["sweep", "--scenario-file", good.to_str().unwrap(), "--out", o]);
    assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
}

#[test]
fn a_sweep_plan_replays_to_the_same_artifact_bytes() {
    let dir = std::env::temp_dir().join(format!("kvsim-sweep-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = |n: &str| dir.join(n).to_str().unwrap().to_string();
    let r = kvsim(&[
        "sweep",
        "--scenario",
        "gpt-oss-tp",
        "--out",
        &p("art.json"),
        "--plan-out",
        &p("plan.json"),
    ]);
    assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
    let r = kvsim(&[
        "replay",
        &p("plan.json"),
        "--out",
        &p("result.json"),
        "--artifact-out",
        &p("again.json"),
    ]);
    assert_eq!(r.status.code(), Some(0));
    for (format, file) in [
        ("artifact", "art.json"),
        ("plan", "plan.json"),
        ("replay", "result.json"),
    ] {
        assert_valid_file(format, &dir.join(file));
    }
    assert_eq!(
        std::fs::read(p("art.json")).unwrap(),
        std::fs::read(p("again.json")).unwrap()
    );
}

#[test]
fn a_sweep_with_a_short_timeout_writes_a_partial_artifact() {
    let dir = std::env::temp_dir().join(format!("kvsim-timeout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("a.json");
    let o = out.to_str().unwrap();
    let r = kvsim(&[
        "sweep",
        "--scenario",
        "deepseek-mla",
        "--timeout-seconds",
        "0.03",
        "--out",
        o,
    ]);
    assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(String::from_utf8_lossy(&r.stdout).contains("stop_reason timeout"));
    assert_valid_file("artifact", &out);
    let a: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(a["status"], "partial");
    assert_eq!(a["stop_reason"], "timeout");
    assert!(a["coverage"]["completed_points"].as_u64() < a["coverage"]["expected_points"].as_u64());
    let r = kvsim(&[
        "sweep",
        "--scenario",
        "deepseek-mla",
        "--timeout-seconds",
        "0",
        "--out",
        o,
    ]);
    assert_eq!(r.status.code(), Some(2));
}

#[test]
fn random_kda_puts_the_hybrid_model_on_chains() {
    let dir = std::env::temp_dir().join(format!("kvsim-rkda-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("a.json");
    let o = out.to_str().unwrap();
    let r = kvsim(&["sweep", "--scenario", "glm53-flash", "--random-kda", "--out", o]);
    assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
    assert_valid_file("artifact", &out);
    let a: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(a["kvwarm"]["initialization_strategy"], "shared_prefix_chain");
    assert_eq!(a["recurrent_state"]["initialization"], "random");
    let r = kvsim(&["sweep", "--scenario", "llama31-8b", "--random-kda", "--out", o]);
    assert_eq!(r.status.code(), Some(2));
}

#[test]
fn gen_traces_writes_valid_kvtraces() {
    let dir = std::env::temp_dir().join(format!("kvsim-gen-{}", std::process::id()));
    let r = kvsim(&[
        "gen-traces",
        "--seed",
        "3",
        "--count",
        "12",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
    let files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 12, "{files:?}");
    for f in files {
        assert_valid_file("kvtrace", &f);
    }
}
