//! The real planner under the swarm (`kvsim check --planner dynamo`,
//! spec/dynamo.md §9): persistent workers, byte-identical reports whatever the
//! worker count, hung and crashed cases reported without ending the run, and
//! seed-bug patches hunted, shrunk and reproduced by one command.
//!
//! Needs the environment `conformance/dynamo/setup_venv.sh` installs (skips
//! without it unless `KVSIM_REQUIRE_DYNAMO=1`); the bad-input tests need none.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{have_env, kvsim, root, tmp_dir, venv};

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json_of(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

/// The installed module, patched by appending `tail` (a planner that misbehaves on purpose).
fn planner_with(dir: &Path, tail: &str) -> String {
    let py = std::fs::read_dir(venv().join("lib"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("site-packages/dynamo/vllm/instrumented_scheduler.py"))
        .find(|p| p.is_file())
        .expect("installed planner");
    let mut src = std::fs::read_to_string(py).unwrap();
    src.push_str(tail);
    let out = dir.join("planner.py");
    std::fs::write(&out, src).unwrap();
    out.display().to_string()
}

#[test]
fn same_flags_same_bytes_whatever_the_worker_count() {
    if !have_env("same-bytes") {
        return;
    }
    let d = tmp_dir("bytes");
    let plans = d.join("plans").display().to_string();
    let run = |extra: &[&str]| {
        let mut a = vec![
            "check",
            "--planner",
            "dynamo",
            "--scenario",
            "minimax-m27-ep",
            "--scenario",
            "gpt-oss-tp",
            "--cases",
            "3",
            "--seed",
            "7",
            "--json",
            "--plans-dir",
            &plans,
        ];
        a.extend(extra);
        kvsim(&a)
    };
    let a = run(&["--jobs", "1"]);
    let b = run(&["--jobs", "2"]);
    assert!(a.status.code() == Some(0) || a.status.code() == Some(1), "{}", text(&a));
    assert_eq!(a.stdout, b.stdout, "jobs 1 and jobs 2 differ");
    let r = json_of(&a);
    assert_eq!(r["format"], "kvsim-check-dynamo/1");
    assert_eq!(r["cases_run"], 6);
    assert_eq!(r["planner"]["version"], "1.6.1");
    let ran: u64 = r["bases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["cases"].as_u64().unwrap())
        .sum();
    assert_eq!(ran, 6);
    // Shards split the run exactly.
    let half = json_of(&run(&["--jobs", "1", "--shard", "1/2"]));
    assert_eq!(half["cases_run"], 3);
}

#[test]
fn a_hung_case_is_reported_and_the_run_still_ends() {
    if !have_env("hung") {
        return;
    }
    let d = tmp_dir("hung");
    let src = planner_with(&d, "\nimport time as _t\nwhile True:\n    _t.sleep(0.05)\n");
    let plans = d.join("plans").display().to_string();
    let out = kvsim(&[
        "check",
        "--planner",
        "dynamo",
        "--scenario",
        "llama31-8b",
        "--cases",
        "2",
        "--jobs",
        "1",
        "--harness-timeout",
        "3",
        "--planner-source",
        &src,
        "--json",
        "--plans-dir",
        &plans,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let r = json_of(&out);
    assert_eq!(r["cases_run"], 2);
    let f = &r["findings"][0];
    assert_eq!(f["key"], "DY-HUNG", "{r}");
    assert_eq!(f["cases"], 2);
    // The finding's scenario file, as the swarm wrote it, is a valid scenario file.
    let written: Vec<_> = std::fs::read_dir(&plans)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".scenario.json"))
        .collect();
    assert!(!written.is_empty(), "no scenario file in {plans}");
    for p in written {
        common::schema::assert_valid_file("scenario", &p);
    }
    assert!(f["minimal"]["command"].as_str().unwrap().contains("--planner-source"));
}

#[test]
fn a_crashed_case_is_reported_and_the_next_case_still_runs() {
    if !have_env("crashed") {
        return;
    }
    let d = tmp_dir("crash");
    let src = planner_with(
        &d,
        "\nimport os as _os, signal as _sig\n_os.kill(_os.getpid(), _sig.SIGKILL)\n",
    );
    let plans = d.join("plans").display().to_string();
    let out = kvsim(&[
        "check",
        "--planner",
        "dynamo",
        "--scenario",
        "llama31-8b",
        "--cases",
        "2",
        "--jobs",
        "1",
        "--planner-source",
        &src,
        "--json",
        "--plans-dir",
        &plans,
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let r = json_of(&out);
    assert_eq!(r["findings"][0]["key"], "DY-CRASHED", "{r}");
    assert_eq!(r["findings"][0]["cases"], 2, "both cases ran: {r}");
    assert!(r["findings"][0]["verdict"]["detail"]
        .as_str()
        .unwrap()
        .contains("signal 9"));
}

#[test]
fn a_seed_bug_patch_is_hunted_shrunk_and_reproduced_by_its_command() {
    if !have_env("hunt") {
        return;
    }
    let d = tmp_dir("hunt");
    let plans = d.join("plans").display().to_string();
    let out = kvsim(&[
        "check",
        "--planner",
        "dynamo",
        "--mutant",
        "gate-attribute-error",
        "--scenario",
        "llama31-8b",
        "--cases",
        "6",
        "--jobs",
        "1",
        "--json",
        "--plans-dir",
        &plans,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let r = json_of(&out);
    let row = &r["mutants"][0];
    assert_eq!(row["killed"], true, "{r}");
    assert_eq!(row["bug"], 18);
    assert_eq!(row["verdict"], "DY-RAISED AttributeError");
    let cmd = row["minimal"]["command"].as_str().unwrap();
    assert!(cmd.contains("--mutant gate-attribute-error"), "{cmd}");
    // The one command reproduces it; the unpatched planner passes the same scenario.
    let args: Vec<&str> = cmd.split_whitespace().skip(1).collect();
    let again = kvsim(&args);
    assert_eq!(again.status.code(), Some(1), "{}", text(&again));
    assert!(text(&again).contains("DY-RAISED"), "{}", text(&again));
    let plain: Vec<&str> = {
        let mut v = Vec::new();
        let mut skip = false;
        for a in &args {
            if skip {
                skip = false;
                continue;
            }
            if *a == "--mutant" {
                skip = true;
                continue;
            }
            v.push(*a);
        }
        v
    };
    let unpatched = kvsim(&plain);
    assert_eq!(unpatched.status.code(), Some(0), "{}", text(&unpatched));
}

#[test]
fn every_seed_bug_patch_applies_to_the_installed_planner() {
    if !have_env("patches") {
        return;
    }
    let out = Command::new(venv().join("bin/python"))
        .arg(root().join("conformance/dynamo/mutants/apply.py"))
        .arg("--check-all")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let files = std::fs::read_dir(root().join("conformance/dynamo/mutants"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "json"))
        .count();
    assert!(files >= 15, "{files} patches");
}

#[test]
fn bad_flags_exit_2() {
    for (args, needle) in [
        (vec!["check", "--planner", "dynamo", "--jobs", "0"], "--jobs"),
        (
            vec!["check", "--planner", "dynamo", "--scenario", "nope"],
            "unknown base",
        ),
        (vec!["check", "--planner", "dynamo", "--cases", "0"], "--cases"),
        (
            vec!["check", "--planner", "dynamo", "--case", "240"],
            "--case 240 is not in this run",
        ),
        (vec!["check", "--case", "99999"], "--case 99999 is not in this run"),
        (
            vec!["check", "--planner", "dynamo", "--mutant", "no-such-bug"],
            "unknown real-planner mutant",
        ),
        // --jobs applies to kvsim's own planners too; --planner-source does not.
        (vec!["check", "--planner-source", "x.py"], "--planner dynamo only"),
        (
            vec!["check", "--planner", "dynamo", "--planner-source", "/nonexistent/x.py"],
            "does not exist",
        ),
    ] {
        let out = kvsim(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(needle), "{args:?}: {}", text(&out));
    }
}
