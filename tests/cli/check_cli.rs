//! `kvsim check` and `kvsim mutants` end to end: exit codes, byte-identical JSON
//! for the same seed, bad flags, and a shrunk plan `kvsim replay` reproduces.

use std::process::{Command, Output};

mod common;
use common::schema::{assert_valid, assert_valid_file, closed_and_typed};

fn kvsim(args: &[&str], dir: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("kvsim runs")
}

fn tmp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kvsim-check-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn check_passes_and_its_json_is_byte_identical_for_the_same_seed() {
    let d = tmp("json");
    let a = kvsim(&["check", "--cases", "6", "--seed", "5", "--json"], &d);
    let b = kvsim(&["check", "--cases", "6", "--seed", "5", "--json"], &d);
    assert_eq!(a.stdout, b.stdout);
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    closed_and_typed("check", "check --json", &v);
    assert_eq!(v["format"], "kvsim-check/1");
    assert_eq!(v["scenarios"].as_array().unwrap().len(), 7);
    assert!(v["failures"].as_array().unwrap().is_empty());
    // Another seed draws other cases.
    let c = kvsim(&["check", "--cases", "6", "--seed", "6", "--json"], &d);
    assert_ne!(a.stdout, c.stdout);
}

#[test]
fn jobs_do_not_change_the_report() {
    let d = tmp("jobs");
    let run = |jobs: &str| kvsim(&["check", "--cases", "4", "--seed", "2", "--json", "--jobs", jobs], &d);
    let (one, two) = (run("1"), run("2"));
    let v: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    assert!(v["failures"].as_array().unwrap().is_empty());
    assert_eq!(one.status.code(), two.status.code());
    assert_eq!(one.stdout, two.stdout, "--jobs 1 and --jobs 2 differ");
    assert_eq!(run("3").stdout, one.stdout);
}

#[test]
fn shards_pass_alone_and_merge_into_the_unsharded_report() {
    let d = tmp("shards");
    // 21 cases miss some coverage goal: the whole run exits 1 for it, and so must the merge.
    let whole = kvsim(&["check", "--cases", "3", "--seed", "4", "--json"], &d);
    assert_eq!(whole.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&whole.stdout).unwrap();
    assert!(v["failures"].as_array().unwrap().is_empty());
    assert!(!v["missed_goals"].as_array().unwrap().is_empty());
    let mut files = Vec::new();
    for k in 1..=4 {
        let shard = format!("{k}/4");
        let out = kvsim(
            &["check", "--cases", "3", "--seed", "4", "--shard", &shard, "--json"],
            &d,
        );
        // Each shard reaches fewer goals still, and passes: goals are the merge's to judge.
        assert_eq!(
            out.status.code(),
            Some(0),
            "shard {shard}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let f = d.join(format!("shard{k}.json"));
        std::fs::write(&f, &out.stdout).unwrap();
        assert_valid_file("check", &f);
        files.push(f.display().to_string());
    }
    let mut args = vec!["check", "merge", "--json"];
    args.extend(files.iter().rev().map(String::as_str));
    let merged = kvsim(&args, &d);
    assert_eq!(merged.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&merged.stderr).contains("goal(s) missed"));
    assert_valid(
        "check",
        "check merge --json",
        &serde_json::from_slice(&merged.stdout).unwrap(),
    );
    assert_eq!(
        String::from_utf8_lossy(&merged.stdout),
        String::from_utf8_lossy(&whole.stdout),
        "the merge is not the unsharded run"
    );
    // The text report of the merge is the unsharded run's too.
    let text = kvsim(&["check", "--cases", "3", "--seed", "4"], &d);
    let mut args = vec!["check", "merge"];
    args.extend(files.iter().map(String::as_str));
    assert_eq!(kvsim(&args, &d).stdout, text.stdout);
    // A missing shard, a shard twice, a file that is not a report: exit 2, typed.
    let bad_json = d.join("bad.json");
    std::fs::write(&bad_json, "{\"format\": 3}").unwrap();
    let bad_json = bad_json.display().to_string();
    for (files, says) in [
        (vec![&files[0], &files[1], &files[2]], "shards missing: 4/4"),
        (
            vec![&files[0], &files[1], &files[2], &files[3], &files[1]],
            "given twice",
        ),
        (vec![&bad_json], "expected a `kvsim check --json` report"),
    ] {
        let mut args = vec!["check", "merge"];
        args.extend(files.iter().map(|f| f.as_str()));
        let out = kvsim(&args, &d);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says) && !err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn one_case_passes_alone() {
    let d = tmp("case");
    let out = kvsim(&["check", "--case", "3"], &d);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("reported, not enforced: case 3 alone"), "{text}");
    assert!(text.contains("result: PASSED (1 cases"), "{text}");
}

#[test]
fn a_mutant_hunt_prints_a_replay_command_that_reproduces_the_failure() {
    let d = tmp("hunt");
    for (mutant, engine) in [("cow-release-in-window", false), ("fence-bypass", true)] {
        let a = kvsim(&["check", "--mutant", mutant, "--json"], &d);
        let b = kvsim(&["check", "--mutant", mutant, "--json"], &d);
        assert_eq!(a.status.code(), Some(0), "{}", String::from_utf8_lossy(&a.stderr));
        assert_eq!(a.stdout, b.stdout, "{mutant}: --json is not deterministic");
        let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
        closed_and_typed("mutants", "check --mutant --json", &v);
        let row = &v["mutants"][0];
        assert_eq!(row["killed"], true);
        let cmd = row["replay"].as_str().unwrap();
        assert_eq!(cmd.contains("--mutant"), engine, "{cmd}");
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        assert_valid_file("plan", &d.join(args[1]));
        let out = kvsim(&args, &d);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(row["invariant"].as_str().unwrap()), "{cmd}: {text}");
    }
}

#[test]
fn pairs_give_the_failing_case_and_its_fixed_counterpart() {
    let d = tmp("pairs");
    let out = kvsim(&["check", "--mutant", "registration-in-timed-window", "--pairs"], &d);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = d.join("kvsim-check-plans");
    let failing = dir.join("registration-in-timed-window.failing.json");
    let fixed = dir.join("registration-in-timed-window.fixed.json");
    assert_valid_file("plan", &failing);
    assert_valid_file("plan", &fixed);
    // The whole failing case fails with the mutant's invariant; the same case without it passes.
    let bad = kvsim(&["replay", failing.to_str().unwrap()], &d);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stdout).contains("PL-TIMED-HOST"));
    let ok = kvsim(&["replay", fixed.to_str().unwrap()], &d);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stdout));
    // Engine mutants' plans hold no bug by themselves: no pair.
    let out = kvsim(&["check", "--mutant", "fence-bypass", "--pairs"], &d);
    assert_eq!(out.status.code(), Some(0));
    assert!(!dir.join("fence-bypass.fixed.json").exists());
}

#[test]
fn bad_flags_exit_2() {
    let d = tmp("bad");
    for args in [
        vec!["check", "--shard", "0/3"],
        vec!["check", "--shard", "4/3"],
        vec!["check", "--shard", "x"],
        vec!["check", "--mutant", "no-such-bug"],
        vec!["check", "--scenario", "nope"],
        vec!["check", "--cases", "0"],
        vec!["check", "--jobs", "0"],
        vec!["check", "--pairs"],
        vec!["check", "merge", "no-such-report.json"],
    ] {
        let out = kvsim(&args, &d);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}

#[test]
fn mutants_lists_every_seed_bug_mutant_with_its_bug_number() {
    let out = kvsim(&["mutants"], &std::env::temp_dir());
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for b in kvsim_core::bugs::BUGS {
        assert!(
            text.lines()
                .any(|l| l.starts_with(b.name) && l.contains(&format!(" {} ", b.bug))),
            "{}",
            b.name
        );
    }
}
