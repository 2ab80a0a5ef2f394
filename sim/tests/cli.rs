//! The `kvsim` binary end to end: byte-exact output and exit codes on bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kvsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(args)
        .output()
        .expect("kvsim runs")
}

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data").join(name)
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
