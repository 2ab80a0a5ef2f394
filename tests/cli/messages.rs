//! Messages a user reads (issue 22): each names the problem in the user's terms, and bad input
//! exits 2.

use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::kvsim;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn data(name: &str) -> String {
    common::root().join("tests/data").join(name).display().to_string()
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p: PathBuf = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

#[test]
fn a_violation_names_its_op_by_number() {
    let r = kvsim(&["replay", &data("plans/shadow_one_group.json")]);
    assert_eq!(r.status.code(), Some(1));
    let out = stdout(&r);
    assert!(out.starts_with("FAILED PL-SHADOW-ATOMIC at step "), "{out}");
    assert!(out.contains(" rank 0 op "), "{out}");
    assert!(!out.contains("Some("), "{out}");
}

#[test]
fn a_pool_of_zero_blocks_is_named_pool_blocks() {
    let d = common::tmp_dir("pool0");
    let mut plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data("plans/shadow_decode.json")).unwrap()).unwrap();
    plan["scenario"]["pool_blocks"] = 0.into();
    let r = kvsim(&["replay", &write(&d, "pool0.json", &plan.to_string())]);
    assert_eq!(r.status.code(), Some(2));
    let err = stderr(&r);
    assert!(
        err.contains("at $.scenario.pool_blocks: must be >= 2 (block 0 is the null block), got 0"),
        "{err}"
    );
    assert!(!err.contains("num_blocks"), "{err}");
    // The same in a scenario file.
    let mut s = serde_json::to_value(kvsim_core::fpm::scenarios::find_scenario("llama31-8b").unwrap()).unwrap();
    s["scenario"]["pool_blocks"] = 0.into();
    let f = write(&d, "scenario.json", &s.to_string());
    let r = kvsim(&[
        "sweep",
        "--scenario-file",
        &f,
        "--out",
        &d.join("a.json").display().to_string(),
    ]);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        stderr(&r).contains("$.scenario.pool_blocks: must be >= 2"),
        "{}",
        stderr(&r)
    );
}

#[test]
fn a_negative_count_is_called_negative() {
    for (args, flag) in [
        (vec!["check", "--cases", "-1"], "--cases"),
        (vec!["check", "--seed", "-5"], "--seed"),
        (vec!["gen-traces", "--count", "-2", "--out", "x"], "--count"),
        (vec!["fuzz", "--iterations", "-1"], "--iterations"),
    ] {
        let r = kvsim(&args);
        assert_eq!(r.status.code(), Some(2), "{args:?}");
        let err = stderr(&r);
        assert!(
            err.contains(&format!("{flag} must not be negative, got -")),
            "{args:?}: {err}"
        );
        assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
    }
}

#[test]
fn a_simulator_result_where_a_gpu_result_is_needed_says_so() {
    let d = common::tmp_dir("simresult");
    let sim = d.join("sim.json").display().to_string();
    let r = kvsim(&["replay", &data("plans/shadow_decode.json"), "--out", &sim]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let plan = data("plans/shadow_decode.json");
    let pred = d.join("pred.json").display().to_string();
    assert_eq!(kvsim(&["predict", &plan, "--out", &pred]).status.code(), Some(0));
    let profile = d.join("p.json").display().to_string();
    for (args, says) in [
        (
            vec!["calibrate", &sim, "--out", &profile],
            "this is a simulator result (`kvsim replay` without `--backend gpu`); a GPU result is needed",
        ),
        (vec!["compare", &pred, &sim], "this is a simulator result"),
        (
            vec!["compare", &sim, &sim],
            "this is a simulator result (`kvsim replay` without `--backend gpu`); a prediction is needed",
        ),
        (
            vec!["calibrate", &pred, "--out", &profile],
            "this is a prediction (`kvsim predict`); a GPU result is needed",
        ),
    ] {
        let r = kvsim(&args);
        assert_eq!(r.status.code(), Some(2), "{args:?}");
        let err = stderr(&r);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("invalid type"), "{args:?}: {err}");
    }
    assert!(!Path::new(&profile).exists());
}

#[test]
fn a_missing_top_level_field_is_at_dollar_not_dollar_dot_dot() {
    let d = common::tmp_dir("missing");
    let f = write(&d, "s.json", r#"{"name": "x", "scenario": {}}"#);
    let r = kvsim(&[
        "sweep",
        "--scenario-file",
        &f,
        "--out",
        &d.join("a.json").display().to_string(),
    ]);
    assert_eq!(r.status.code(), Some(2));
    let err = stderr(&r);
    assert!(err.contains("at $.scenario: missing field `name`"), "{err}");
    let f = write(&d, "t.json", r#"{"name": "x"}"#);
    let r = kvsim(&[
        "sweep",
        "--scenario-file",
        &f,
        "--out",
        &d.join("a.json").display().to_string(),
    ]);
    assert_eq!(r.status.code(), Some(2));
    let err = stderr(&r);
    assert!(err.contains("at $: missing field `scenario`"), "{err}");
    assert!(!err.contains("$.."), "{err}");
    // A check report to merge, a profile and a plan say it the same way.
    let f = write(&d, "empty.json", "{}");
    let r = kvsim(&["check", "merge", &f]);
    assert_eq!(r.status.code(), Some(2));
    assert!(stderr(&r).contains("at $: missing field `format`"), "{}", stderr(&r));
    let r = kvsim(&[
        "predict",
        &data("plans/shadow_decode.json"),
        "--profile",
        &f,
        "--out",
        "x",
    ]);
    assert_eq!(r.status.code(), Some(2));
    assert!(stderr(&r).contains("at $: missing field `format`"), "{}", stderr(&r));
    let r = kvsim(&["replay", &f]);
    assert_eq!(r.status.code(), Some(2));
    assert!(
        stderr(&r).contains("malformed plan at $: missing field `format`"),
        "{}",
        stderr(&r)
    );
}

/// Every subcommand's name path (`check`, `check merge`, `dynamo run`, ...).
fn subcommands(c: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
    for s in c.get_subcommands() {
        let mut path = prefix.to_vec();
        path.push(s.get_name().to_string());
        out.push(path.clone());
        subcommands(s, &path, out);
    }
}

#[test]
fn help_cites_no_section_of_a_file_users_lack() {
    let mut all = vec![vec![]];
    subcommands(&kvsim_cli::cli::command(), &[], &mut all);
    assert!(all.len() > 20, "{all:?}");
    for path in all {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let r = kvsim(&args);
        assert_eq!(r.status.code(), Some(0), "{args:?}");
        let text = stdout(&r);
        for lacking in ["§", "dynamo_fpm.md", "vllm_kv.md", "research/"] {
            assert!(!text.contains(lacking), "{args:?} cites {lacking}:\n{text}");
        }
    }
}

#[test]
fn a_plan_with_a_malformed_benchmark_record_is_refused_with_its_path() {
    let d = common::tmp_dir("record");
    let plan = d.join("plan.json").display().to_string();
    let art = d.join("art.json").display().to_string();
    let r = kvsim(&["sweep", "--scenario", "llama31-8b", "--out", &art, "--plan-out", &plan]);
    assert_eq!(r.status.code(), Some(0), "{}", stderr(&r));
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    v["benchmark"]["executions"][0]["regime"] = "real_kv".into();
    let bad = write(&d, "bad.json", &v.to_string());
    for args in [vec!["replay", &bad], vec!["predict", &bad, "--out", &art]] {
        let r = kvsim(&args);
        assert_eq!(r.status.code(), Some(2), "{args:?}");
        let err = stderr(&r);
        assert!(
            err.contains("malformed plan at $.benchmark.executions[0].regime: unknown field `regime`"),
            "{args:?}: {err}"
        );
    }
}
