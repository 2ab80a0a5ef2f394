//! `kvsim check` and `kvsim mutants` end to end: exit codes, byte-identical JSON
//! for the same seed, bad flags, and a shrunk plan `kvsim replay` reproduces.

use std::process::{Command, Output};

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
    assert_eq!(v["format"], "kvsim-check/1");
    assert_eq!(v["scenarios"].as_array().unwrap().len(), 7);
    assert!(v["failures"].as_array().unwrap().is_empty());
    // Another seed draws other cases.
    let c = kvsim(&["check", "--cases", "6", "--seed", "6", "--json"], &d);
    assert_ne!(a.stdout, c.stdout);
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
        let row = &v["mutants"][0];
        assert_eq!(row["killed"], true);
        let cmd = row["replay"].as_str().unwrap();
        assert_eq!(cmd.contains("--mutant"), engine, "{cmd}");
        let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        let out = kvsim(&args, &d);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(row["invariant"].as_str().unwrap()), "{cmd}: {text}");
    }
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
