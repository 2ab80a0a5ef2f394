//! Describing your own model: `kvsim scenarios --show NAME` prints a built-in as a scenario
//! file that `sweep --scenario-file` and `check --scenario-file` take back unchanged, an edited
//! copy is swarmed like a built-in, and a bad file is an input error (exit 2).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kvsim_core::fpm::scenario_file::load_scenario_file;
use kvsim_core::fpm::scenarios::{builtin_scenarios, find_scenario};

fn kvsim(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(args)
        .current_dir(dir)
        .env("KVSIM_PROGRESS", "off")
        .output()
        .expect("kvsim runs")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kvsim-scenario-files-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn every_builtin_shown_is_a_scenario_file_of_itself() {
    let d = tmp("show");
    for s in builtin_scenarios() {
        let out = kvsim(&["scenarios", "--show", &s.name], &d);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let back = load_scenario_file(&String::from_utf8(out.stdout).unwrap()).unwrap();
        assert_eq!(back, s, "{}", s.name);
    }
    let out = kvsim(&["scenarios", "--show", "no-such-model"], &d);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("llama31-8b"), "{}", stderr(&out));
}

#[test]
fn a_shown_scenario_sweeps_and_checks_as_the_builtin_does() {
    let d = tmp("round-trip");
    let shown = kvsim(&["scenarios", "--show", "llama31-8b"], &d);
    std::fs::write(d.join("mine.json"), &shown.stdout).unwrap();
    let by_name = kvsim(&["sweep", "--scenario", "llama31-8b", "--out", "a.json"], &d);
    let by_file = kvsim(&["sweep", "--scenario-file", "mine.json", "--out", "b.json"], &d);
    assert_eq!((by_name.status.code(), by_file.status.code()), (Some(0), Some(0)));
    assert_eq!(
        std::fs::read(d.join("a.json")).unwrap(),
        std::fs::read(d.join("b.json")).unwrap()
    );
    let args = ["check", "--cases", "4", "--seed", "3", "--json"];
    let named = kvsim(&[&args[..], &["--scenario", "llama31-8b"]].concat(), &d);
    let filed = kvsim(&[&args[..], &["--scenario-file", "mine.json"]].concat(), &d);
    // One scenario is not the built-in suite: the goals are reported, not enforced.
    assert_eq!(filed.status.code(), Some(0), "{}", stderr(&filed));
    assert_eq!(named.stdout, filed.stdout);
    let v: serde_json::Value = serde_json::from_slice(&filed.stdout).unwrap();
    assert_eq!(v["scenario_names"], serde_json::json!(["llama31-8b"]));
    assert_eq!(v["cases_run"], 4);
}

#[test]
fn an_edited_scenario_is_swarmed_beside_a_builtin() {
    let d = tmp("edited");
    let mut mine = find_scenario("gpt-oss-tp").unwrap();
    mine.name = "my-moe".into();
    mine.scenario.name = "my-moe".into();
    mine.scenario.pool_blocks = 1200;
    mine.bench.expert_parallel = true;
    std::fs::write(d.join("my-moe.json"), serde_json::to_string_pretty(&mine).unwrap()).unwrap();
    let out = kvsim(
        &[
            "check",
            "--cases",
            "6",
            "--scenario",
            "llama31-8b",
            "--scenario-file",
            "my-moe.json",
            "--json",
        ],
        &d,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["scenario_names"], serde_json::json!(["llama31-8b", "my-moe"]));
    let rows = v["scenarios"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["passed"].as_u64().unwrap() > 0), "{rows:?}");
    let text = kvsim(&["check", "--cases", "2", "--scenario-file", "my-moe.json"], &d);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("coverage goals (reported, not enforced"), "{text}");
}

#[test]
fn bad_scenario_files_are_input_errors() {
    let d = tmp("bad");
    let mut v: serde_json::Value =
        serde_json::from_slice(&kvsim(&["scenarios", "--show", "llama31-8b"], &d).stdout).unwrap();
    v["scenario"]["pool_blokcs"] = 5.into();
    std::fs::write(d.join("typo.json"), v.to_string()).unwrap();
    v["scenario"].as_object_mut().unwrap().remove("pool_blokcs");
    v["scenario"]["pool_blocks"] = 5.into();
    std::fs::write(d.join("small.json"), v.to_string()).unwrap();
    let shown = kvsim(&["scenarios", "--show", "llama31-8b"], &d).stdout;
    std::fs::write(d.join("same.json"), shown).unwrap();
    for (args, says) in [
        (vec!["--scenario-file", "missing.json"], "cannot read missing.json"),
        (
            vec!["--scenario-file", "typo.json"],
            "typo.json: at $.scenario.pool_blokcs: unknown field `pool_blokcs`",
        ),
        (
            vec!["--scenario-file", "small.json"],
            "smaller than one max_model_len request",
        ),
        (
            vec!["--scenario-file", "same.json", "--scenario", "llama31-8b"],
            "two scenarios named \"llama31-8b\"",
        ),
        (
            vec!["--scenario-file", "same.json", "--planner", "dynamo"],
            "kvsim dynamo run --scenario-file",
        ),
    ] {
        let out = kvsim(&[&["check", "--cases", "1"][..], &args].concat(), &d);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
