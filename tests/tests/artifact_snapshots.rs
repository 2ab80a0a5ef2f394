//! The reviewed artifact of every built-in scenario × applicable strategy × rank
//! (`snapshots/NAME__STRATEGY__rankR.snap`), one test each, so one change fails exactly the
//! snapshots it touches.
//!
//! Hashes and digests (the plan hash, grid digests, point keys, prompt SHA-256s) are redacted
//! there: a planner change moves hundreds of them, and the review should show the rows that
//! changed. They still guard determinism, all of them, in one small snapshot
//! (`snapshots/artifact_hashes.snap`: per artifact its plan hash, its grid digest and one
//! digest over every other hash field). Review with `cargo insta review` (README).

use kvsim_core::fpm::artifact::RankArtifact;
use kvsim_core::fpm::gate::{gate, Strategy};
use kvsim_core::fpm::scenarios::{builtin_scenarios, find_scenario};
use kvsim_sim::sweep::run_sweep;
use kvsim_tests::schema::assert_valid_ser;
use serde_json::Value;

fn strategy(label: &str) -> Option<Strategy> {
    match label {
        "auto" => None,
        "synthetic" => Some(Strategy::Synthetic),
        "native" => Some(Strategy::Native),
        "chain" => Some(Strategy::Chain),
        other => panic!("no strategy {other:?}"),
    }
}

/// The sweep's artifacts, each checked against the artifact schema (and the plan against its).
fn artifacts(scenario: &str, label: &str) -> Vec<RankArtifact> {
    let s = find_scenario(scenario).unwrap();
    let run = run_sweep(&s, strategy(label)).unwrap_or_else(|e| panic!("{scenario}: {e}"));
    assert!(run.report.passed(), "{scenario} {label}: {:?}", run.report.outcome);
    assert_eq!(run.artifacts.len() as u32, s.scenario.dp_ranks);
    assert_valid_ser("plan", &format!("{scenario} {label}"), &run.plan);
    for (rank, a) in run.artifacts.iter().enumerate() {
        assert_valid_ser("artifact", &format!("{scenario} {label} rank {rank}"), a);
    }
    run.artifacts
}

fn with_snapshot_settings(f: impl FnOnce()) {
    insta::with_settings!({snapshot_path => "../../snapshots", prepend_module_to_snapshot => false}, { f() });
}

fn snapshot(scenario: &str, label: &str, rank: usize) {
    let art = &artifacts(scenario, label)[rank];
    with_snapshot_settings(|| {
        insta::assert_json_snapshot!(format!("{scenario}__{label}__rank{rank}"), art, {
            ".run_id" => "[plan hash]",
            ".**.plan" => "[plan hash]",
            ".**.grid_digest" => "[grid digest]",
            ".**.point_key" => "[sha256]",
            ".**.sha256" => "[sha256]",
        });
    });
}

macro_rules! artifact_snapshots {
    ($($test:ident => ($scenario:literal, $label:literal, $rank:literal)),* $(,)?) => {
        $( #[test] fn $test() { snapshot($scenario, $label, $rank) } )*
        const CASES: &[(&str, &str, usize)] = &[$(($scenario, $label, $rank)),*];
    };
}

artifact_snapshots! {
    deepseek_mla_synthetic_rank0 => ("deepseek-mla", "synthetic", 0),
    deepseek_mla_auto_rank0 => ("deepseek-mla", "auto", 0),
    deepseek_mla_chain_rank0 => ("deepseek-mla", "chain", 0),
    glm53_flash_synthetic_rank0 => ("glm53-flash", "synthetic", 0),
    glm53_flash_native_rank0 => ("glm53-flash", "native", 0),
    gpt_oss_tp_synthetic_rank0 => ("gpt-oss-tp", "synthetic", 0),
    gpt_oss_tp_native_rank0 => ("gpt-oss-tp", "native", 0),
    inkling_tp4_synthetic_rank0 => ("inkling-tp4", "synthetic", 0),
    inkling_tp4_native_rank0 => ("inkling-tp4", "native", 0),
    inkling_tp4_dp2_synthetic_rank0 => ("inkling-tp4-dp2", "synthetic", 0),
    inkling_tp4_dp2_synthetic_rank1 => ("inkling-tp4-dp2", "synthetic", 1),
    inkling_tp4_dp2_native_rank0 => ("inkling-tp4-dp2", "native", 0),
    inkling_tp4_dp2_native_rank1 => ("inkling-tp4-dp2", "native", 1),
    llama31_8b_synthetic_rank0 => ("llama31-8b", "synthetic", 0),
    llama31_8b_auto_rank0 => ("llama31-8b", "auto", 0),
    minimax_m27_ep_synthetic_rank0 => ("minimax-m27-ep", "synthetic", 0),
    minimax_m27_ep_auto_rank0 => ("minimax-m27-ep", "auto", 0),
    minimax_m27_ep_chain_rank0 => ("minimax-m27-ep", "chain", 0),
}

/// Every built-in scenario × strategy the gate allows (native, else auto; chain when
/// eligible; synthetic always) × rank, in the order the scenarios are listed.
fn expected_cases() -> Vec<(String, &'static str, usize)> {
    let mut out = Vec::new();
    for s in builtin_scenarios() {
        let g = gate(&s);
        let mut labels = vec!["synthetic", if g.native { "native" } else { "auto" }];
        if g.chain {
            labels.push("chain");
        }
        for label in labels {
            for rank in 0..s.scenario.dp_ranks as usize {
                out.push((s.name.clone(), label, rank));
            }
        }
    }
    out
}

#[test]
fn every_scenario_strategy_and_rank_has_its_snapshot_test_and_file() {
    let mut want: Vec<String> = expected_cases()
        .iter()
        .map(|(s, l, r)| format!("{s}__{l}__rank{r}"))
        .collect();
    let mut have: Vec<String> = CASES.iter().map(|(s, l, r)| format!("{s}__{l}__rank{r}")).collect();
    want.sort();
    have.sort();
    assert_eq!(
        have, want,
        "the snapshot tests are not the scenario × strategy × rank list"
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../snapshots");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|f| f.strip_suffix(".snap").map(str::to_string))
        .filter(|f| f != "artifact_hashes")
        .collect();
    files.sort();
    assert_eq!(files, want, "snapshot files without a test (or tests without a file)");
}

/// The redacted fields of an artifact, in document order (path, value).
fn hashes(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{path}.{k}");
                let hashed = matches!(k.as_str(), "run_id" | "plan" | "grid_digest" | "point_key" | "sha256");
                match x {
                    Value::String(s) if hashed => out.push((p, s.clone())),
                    _ => hashes(x, &p, out),
                }
            }
        }
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, x)| hashes(x, &format!("{path}[{i}]"), out)),
        _ => {}
    }
}

/// Every hash the artifact snapshots redact, per artifact: its plan hash, its grid digest, and
/// an xxh3-128 of all its hash fields (paths and values, in order), so a change in any of them,
/// a determinism bug included, still fails here.
#[test]
fn artifact_hashes() {
    let mut lines = Vec::new();
    let mut last = (String::new(), "");
    let mut arts = Vec::new();
    for (scenario, label, rank) in CASES {
        if last != (scenario.to_string(), *label) {
            arts = artifacts(scenario, label);
            last = (scenario.to_string(), label);
        }
        let v = serde_json::to_value(&arts[*rank]).unwrap();
        let mut all = Vec::new();
        hashes(&v, "$", &mut all);
        let text: String = all.iter().map(|(p, h)| format!("{p}={h}\n")).collect();
        lines.push(format!(
            "{scenario}__{label}__rank{rank}: plan {} grid {} all {} fields {:032x}",
            v["run_id"].as_str().unwrap(),
            v["grid_digest"].as_str().unwrap(),
            all.len(),
            xxhash_rust::xxh3::xxh3_128(text.as_bytes())
        ));
    }
    with_snapshot_settings(|| insta::assert_snapshot!("artifact_hashes", lines.join("\n")));
}
