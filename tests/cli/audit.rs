//! `kvsim audit` end to end on the real ai-dynamo 1.6.1 artifacts in
//! `tests/data/dynamo_artifacts/`: exit codes, byte-exact lines, `--json`, bad input, and kvsim's own
//! artifact (which speaks the seed-000 vocabulary, so it does not pass as a 1.6.1 artifact).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn kvsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(args)
        .output()
        .expect("kvsim runs")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/dynamo_artifacts")
        .join(name)
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kvsim-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

const COMPLETE: [&str; 3] = [
    "minimax-m27-ep.chain.art.json",
    "deepseek-mla.chain.art.json",
    "llama31-8b.gate-skipped.art.json",
];
const FAILED: &str = "inkling-tp4-dp2.failed.art.json";

#[test]
fn complete_1_6_1_artifacts_pass_with_exit_0() {
    for name in COMPLETE {
        let p = fixture(name);
        let out = kvsim(&["audit", p.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{name}: {}", stdout(&out));
        assert_eq!(
            stdout(&out),
            format!(
                "audit {}: pass (0 error(s), 0 warning(s); status complete; schema ok; 45 checks)\n",
                p.display()
            )
        );
        assert!(out.stderr.is_empty());
    }
}

#[test]
fn the_failed_artifact_is_well_formed_but_reported_as_a_failed_run_with_exit_1() {
    let p = fixture(FAILED);
    let out = kvsim(&["audit", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        format!(
            "error   AU-RUN-FAILED      $.status: the run failed: timed out waiting for attention-DP ranks for benchmark_id=0\n\
             audit {}: fail (1 error(s), 0 warning(s); status failed; schema ok; 45 checks)\n",
            p.display()
        )
    );

    let out = kvsim(&["audit", p.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let j: Value = serde_json::from_slice(&out.stdout).expect("--json prints one JSON object");
    assert_eq!(j["passed"], false);
    assert_eq!(j["schema_ok"], true);
    assert_eq!(j["consistency_checked"], true);
    assert_eq!(j["status"], "failed");
    assert_eq!(j["errors"], 1);
    assert_eq!(j["findings"][0]["id"], "AU-RUN-FAILED");
    assert_eq!(j["findings"][0]["severity"], "error");
    assert_eq!(j["findings"][0]["path"], "$.status");
}

#[test]
fn a_broken_invariant_exits_1_naming_the_check_and_path() {
    let mut v: Value = serde_json::from_slice(&std::fs::read(fixture(COMPLETE[0])).unwrap()).unwrap();
    v["coverage"]["completed_points"] = 11.into();
    v["results"][2]["kv_seed_regime"] = "skip:dense_model_content_insensitive".into();
    v["measurement_protocol"] = serde_json::json!({});
    let p = tmp("broken.json");
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = kvsim(&["audit", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 4, "{lines:#?}");
    assert_eq!(
        lines[0],
        "warning AU-SCHEMA-UNKNOWN  $.measurement_protocol: `measurement_protocol` is not a field 1.6.1 writes"
    );
    assert_eq!(
        lines[1],
        "error   AU-COVERAGE-COUNTS $.coverage.completed_points: 11 but results has 12 row(s)"
    );
    assert!(
        lines[2].starts_with("error   AU-REGIME-VOCAB    $.results[2].kv_seed_regime: "),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].ends_with(": fail (2 error(s), 1 warning(s); status complete; schema ok; 45 checks)"),
        "{}",
        lines[3]
    );
    // Deterministic: the same bytes on a second run.
    assert_eq!(kvsim(&["audit", p.to_str().unwrap()]).stdout, out.stdout);
}

#[test]
fn unreadable_or_malformed_input_exits_2_naming_file_and_path() {
    for (name, body, needle) in [
        ("notjson.json", "{\"schema_version\": 2,", "$: not valid JSON: "),
        (
            "array.json",
            "[1, 2]",
            "$: the top level must be an object, found an array",
        ),
        ("nan.json", "{\"timing\": NaN}", "$: not valid JSON: "),
    ] {
        let p = tmp(name);
        std::fs::write(&p, body).unwrap();
        let out = kvsim(&["audit", p.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{}: {needle}", p.display())), "{name}: {err}");
        assert!(!err.contains("panicked"), "{name}: {err}");
        assert!(out.stdout.is_empty(), "{name}");
    }
    let out = kvsim(&["audit", "/nonexistent/artifact.json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/artifact.json"));
}

#[test]
fn a_structurally_wrong_artifact_skips_the_consistency_checks() {
    let mut v: Value = serde_json::from_slice(&std::fs::read(fixture(COMPLETE[1])).unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("limits");
    v["results"][0]["fpms"] = "none".into();
    let p = tmp("structure.json");
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = kvsim(&["audit", p.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["schema_ok"], false);
    assert_eq!(j["consistency_checked"], false);
    let found: Vec<(&str, &str)> = j["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["id"].as_str().unwrap(), f["path"].as_str().unwrap()))
        .collect();
    assert_eq!(
        found,
        [
            ("AU-SCHEMA-MISSING", "$.limits"),
            ("AU-SCHEMA-TYPE", "$.results[0].fpms")
        ]
    );
}

#[test]
fn kvsims_own_artifact_is_not_a_1_6_1_artifact() {
    let art = tmp("kvsim-llama.json");
    let out = kvsim(&[
        "sweep",
        "--scenario",
        "llama31-8b",
        "--strategy",
        "auto",
        "--out",
        art.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = kvsim(&["audit", art.to_str().unwrap()]);
    assert_ne!(out.status.code(), Some(2));
    let text = stdout(&out);
    // Seed-000 vocabulary: gate-rejected executions counted apart from the fake fallbacks.
    assert!(
        text.contains("warning AU-SCHEMA-UNKNOWN  $.kvwarm.points_gate_skipped: "),
        "{text}"
    );
}
