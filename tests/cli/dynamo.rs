//! The real planner as a plan source (`kvsim dynamo run`, spec/dynamo.md): Dynamo
//! 1.6.1's `InstrumentedScheduler` over vLLM 0.31.0 recorded on CPU, every
//! recording replayed with all invariants and every recorded table.
//!
//! The suite needs the environment `conformance/dynamo/setup_venv.sh` installs
//! (`scripts/test-all` installs it first and sets `KVSIM_REQUIRE_DYNAMO=1`, so
//! there a missing environment fails instead of skipping). The bad-input tests
//! need no environment.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::{have_env, kvsim_with as kvsim, scenario_file, tmp_dir, venv};

struct Run {
    out: Output,
    dir: PathBuf,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    fn report(&self) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(self.dir.join("report.json")).unwrap()).unwrap()
    }
}

/// `kvsim dynamo run` over a built-in (`builtin:NAME`) or a suite scenario file.
fn record(name: &str, extra: &[&str]) -> Run {
    let dir = tmp_dir(name);
    let (plan, art, rep) = (
        dir.join("plan.json"),
        dir.join("artifact.json"),
        dir.join("report.json"),
    );
    let file;
    let mut args = vec!["dynamo", "run"];
    if let Some(b) = name.strip_prefix("builtin:") {
        args.extend(["--scenario", b]);
    } else {
        file = scenario_file(name);
        args.extend(["--scenario-file", &file]);
    }
    let (p, a, r) = (
        plan.display().to_string(),
        art.display().to_string(),
        rep.display().to_string(),
    );
    args.extend(["--plan-out", &p, "--artifact-out", &a, "--report-out", &r]);
    args.extend(extra);
    let out = kvsim(&args, &[]);
    Run { out, dir }
}

/// The recording replays with every table reproduced and every invariant held.
fn assert_passes(name: &str, extra: &[&str]) {
    if have_env(name) {
        passes(name, extra);
    }
}

fn passes(name: &str, extra: &[&str]) -> Run {
    let run = record(name, extra);
    let stdout = run.stdout();
    assert_eq!(
        run.out.status.code(),
        Some(0),
        "{name}: {stdout}{}",
        String::from_utf8_lossy(&run.out.stderr)
    );
    assert!(
        stdout.contains("every recorded table reproduced, all invariants held"),
        "{stdout}"
    );
    let report = run.report();
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(report["replay"]["outcome"], "passed");
    assert_eq!(report["planner"]["version"], "1.6.1");
    assert_eq!(report["planner"]["vllm"], "0.31.0");
    // `kvsim replay` of the written plan agrees (the plan is self-contained).
    let plan = run.dir.join("plan.json");
    common::schema::assert_valid_file("plan", &plan);
    let replay = kvsim(&["replay", plan.to_str().unwrap()], &[]);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&replay.stdout)
    );
    run
}

/// The recording reproduces and `kvsim` reports `id` at `step`.
fn assert_finding(name: &str, extra: &[&str], id: &str, step: u64) -> Run {
    let run = record(name, extra);
    let stdout = run.stdout();
    assert_eq!(
        run.out.status.code(),
        Some(1),
        "{name}: {stdout}{}",
        String::from_utf8_lossy(&run.out.stderr)
    );
    let report = run.report();
    assert_eq!(report["replay"]["invariant"], id, "{report}");
    assert_eq!(report["replay"]["step"], step, "{report}");
    assert!(stdout.contains(&format!("FINDING {id} at step {step}")), "{stdout}");
    run
}

#[test]
fn chain_full_attention_minimax_built_in() {
    assert_passes("builtin:minimax-m27-ep", &[]);
}

#[test]
fn chain_mla_deepseek_built_in() {
    assert_passes("builtin:deepseek-mla", &[]);
}

#[test]
fn synthetic_sliding_window_gpt_oss_built_in() {
    assert_passes("builtin:gpt-oss-tp", &[]);
}

#[test]
fn synthetic_window_4_inkling_built_in() {
    assert_passes("builtin:inkling-tp4", &[]);
}

#[test]
fn synthetic_mamba_glm_built_in() {
    assert_passes("builtin:glm53-flash", &[]);
}

#[test]
fn synthetic_dense_llama_built_in() {
    assert_passes("builtin:llama31-8b", &[]);
}

#[test]
fn chain_async_scheduling_and_the_cost_model_prices_it() {
    if !have_env("mm-async") {
        return;
    }
    let run = passes("mm-async", &[]);
    let (plan, pred) = (run.dir.join("plan.json"), run.dir.join("predict.json"));
    let out = kvsim(
        &["predict", plan.to_str().unwrap(), "--out", pred.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let recorded: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let points = recorded["source"]["points"].as_array().unwrap().len();
    assert!(points > 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("{points} points")), "{stdout}");
}

#[test]
fn chain_mla_async_scheduling() {
    assert_passes("mla-async", &[]);
}

#[test]
fn chain_random_kda_state_groups() {
    assert_passes("glm-random-kda", &[]);
}

#[test]
fn chain_giant_kv_point_repeats_its_steady_step() {
    assert_passes("mm-giant", &[]);
}

#[test]
fn chain_pool_near_capacity() {
    assert_passes("mm-tight", &[]);
}

#[test]
fn sliding_window_chain_forks_from_the_null_block() {
    // The research note's failure, confirmed with vLLM's own KV-config builder
    // (HMA on): the shadow of point 0 forks its window-group tail from the chain's
    // null block; vLLM asserts, the abort leaks the staged blocks.
    if !have_env("gpt-oss-ep") {
        return;
    }
    let run = assert_finding("gpt-oss-ep", &[], "PL-WINDOW", 24);
    let report = run.report();
    assert_eq!(report["status"], "raised");
    assert!(report["traceback"].as_str().unwrap().contains("_apply_cow"), "{report}");
    assert_eq!(
        report["pool"]["referenced_blocks"], 11,
        "the abort leaks the staged tails and the references the half-done registration took"
    );
    assert_eq!(report["artifact_status"], "failed");
}

#[test]
fn an_injected_registration_failure_aborts_cleanly_and_catches_the_unwind_bugs() {
    // `--fail-registration 19:3`: the 4th of point 0's 8 shadows fails, its
    // window-group tail draw raising as a short pool does (after its full-group
    // tail was drawn), before the step-24 PL-WINDOW finding of this layout. 1.6.1
    // unwinds the registration, drains the forks the 3 earlier shadows queued and
    // aborts clean: the fault's own error, judged by what the abort left.
    if !have_env("gpt-oss-ep fault") {
        return;
    }
    let flags = ["--fail-registration", "19:3"];
    let run = record("gpt-oss-ep", &flags);
    let stdout = run.stdout();
    assert_eq!(run.out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("all invariants held"), "{stdout}");
    let report = run.report();
    assert_eq!(report["status"], "fault", "{report}");
    assert_eq!(report["pool"]["referenced_blocks"], 0, "{report}");
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.dir.join("plan.json")).unwrap()).unwrap();
    assert_eq!(
        plan["faults"],
        serde_json::json!([{"fault": "stage_failure", "step": 19, "rank": 0, "after": 3}])
    );
    // §8.2 bug 1: the drawn full-group tail is kept (the registration is not atomic).
    let not_atomic = [&flags[..], &["--mutant", "registration-not-atomic"]].concat();
    assert_finding("gpt-oss-ep", &not_atomic, "PL-SHADOW-ATOMIC", 19);
    // §8.2 bug 12: the earlier shadows' queued forks are kept; the reset fails.
    let undrained = [&flags[..], &["--mutant", "cow-queue-not-drained"]].concat();
    let run = assert_finding("gpt-oss-ep", &undrained, "DY-RAISED", 19);
    assert!(run.stdout().contains("prefix-cache cleanup failed"), "{}", run.stdout());
}

#[test]
fn a_transient_pool_shortfall_fails_a_warm_up_replica_and_1_6_1_discards_it() {
    // Capture sizes 1, 2, 4: batch 8 is eager, so its warm-up replica is the
    // batch-8 rung's first point (step 25). Every free block is held for that
    // one step: the replica's shadows do not fit and it is skipped. 1.6.1 drops
    // the replica (dynamo_fpm.md §1.6); §8.2 bug 26's patch records it as a skip.
    let name = "mutants/warmup-replica-recorded-skipped";
    if !have_env("transient shrink") {
        return;
    }
    let flags = ["--shrink-pool", "25:0:3000:1"];
    let run = record(name, &flags);
    let stdout = run.stdout();
    assert_eq!(run.out.status.code(), Some(0), "{stdout}");
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.dir.join("plan.json")).unwrap()).unwrap();
    assert_eq!(
        plan["faults"],
        serde_json::json!([{"fault": "shrink_pool", "step": 25, "blocks": 3000, "steps": 1}])
    );
    let art: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.dir.join("artifact.json")).unwrap()).unwrap();
    assert_eq!(
        (art["usable"].as_bool(), art["skipped_points"].as_array().map(Vec::len)),
        (Some(true), Some(0))
    );
    let patched = record(
        name,
        &[&flags[..], &["--mutant", "warmup-replica-recorded-skipped"]].concat(),
    );
    let out = patched.stdout();
    assert_eq!(patched.out.status.code(), Some(1), "{out}");
    assert!(out.contains("FINDING AU-COVERAGE-TOTAL (artifact audit"), "{out}");
    // The check that names the bug: the kept skip is the replica.
    let art = patched.dir.join("artifact.json");
    let audit = kvsim(&["audit", art.to_str().unwrap()], &[]);
    let text = String::from_utf8_lossy(&audit.stdout);
    assert_eq!(audit.status.code(), Some(1), "{text}");
    assert!(text.contains("AU-REPLICA-KEPT"), "{text}");
}

#[test]
fn soft_timeout_mid_build() {
    // 45 virtual ms per step: the 1 s deadline passes while the batch-8 stage builds.
    // 1.6.1 closes the stage as failed, then still measures one point because none
    // was measured yet (its boundary check waits for a first result): PL-DEADLINE
    // spares a rank's first point (docs/dynamo-findings.md §2).
    if !have_env("mm-timeout") {
        return;
    }
    let run = passes("mm-timeout", &["--clock-scale", "45"]);
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.dir.join("plan.json")).unwrap()).unwrap();
    assert_eq!(
        plan["faults"],
        serde_json::json!([{"fault": "soft_timeout", "step": 22}])
    );
    let injected: Vec<u64> = plan["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|st| st["ops"].as_array().unwrap().iter().any(|o| o["op"] == "inject_point"))
        .map(|st| st["step"].as_u64().unwrap())
        .collect();
    assert_eq!(injected.len(), 1, "one point, after the deadline: {injected:?}");
    assert!(injected[0] > 22, "{injected:?}");
    let art: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.dir.join("artifact.json")).unwrap()).unwrap();
    assert_eq!(art["status"], "partial");
    assert_eq!(art["stop_reason"], "timeout");
    let stages = art["kvwarm"]["stages"].as_array().unwrap();
    assert!(stages.iter().any(|s| s["soft_timeout"] == true), "{stages:?}");
}

#[test]
fn same_scenario_same_bytes() {
    if !have_env("determinism") {
        return;
    }
    let a = record("mm-async", &[]);
    let b = record("mm-async", &[]);
    for f in ["plan.json", "artifact.json", "report.json"] {
        assert_eq!(
            std::fs::read(a.dir.join(f)).unwrap(),
            std::fs::read(b.dir.join(f)).unwrap(),
            "{f} differs between two runs"
        );
    }
}

/// The installed planner module (the `--planner-source` tests patch a copy).
fn installed_module() -> PathBuf {
    let lib = venv().join("lib");
    let py = std::fs::read_dir(&lib)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().starts_with("python3"))
        .expect("lib/python3.*");
    py.path().join("site-packages/dynamo/vllm/instrumented_scheduler.py")
}

#[test]
fn planner_source_runs_a_working_copy_and_records_which() {
    if !have_env("planner-source") {
        return;
    }
    let src = std::fs::read_to_string(installed_module()).unwrap();
    let anchor = "        new_reqs_data: list[NewRequestData] = []\n";
    assert_eq!(src.matches(anchor).count(), 1, "the patch anchor moved");
    let patched = src.replacen(
        anchor,
        &format!("        raise AssertionError(\"kvsim test: a slip in the working copy\")\n{anchor}"),
        1,
    );
    let dir = tmp_dir("working-copy");
    let copy = dir.join("instrumented_scheduler.py");
    std::fs::write(&copy, &patched).unwrap();
    let copy_arg = copy.display().to_string();
    let run = assert_finding("builtin:llama31-8b", &["--planner-source", &copy_arg], "DY-RAISED", 6);
    let report = run.report();
    assert_eq!(report["planner"]["installed"], false);
    assert_eq!(report["planner"]["source"], copy_arg.as_str());
    let sha = report["planner"]["source_sha256"].as_str().unwrap().to_string();
    assert_eq!(sha.len(), 64);
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.dir.join("plan.json")).unwrap()).unwrap();
    assert_eq!(plan["source"]["source_sha256"], sha.as_str());
    assert_eq!(plan["source"]["installed"], false);
    assert!(report["error"].as_str().unwrap().contains("a slip in the working copy"));
}

#[test]
fn a_sweep_that_does_not_end_within_its_budget_is_a_finding() {
    if !have_env("stalled") {
        return;
    }
    assert_finding("builtin:llama31-8b", &["--max-steps", "5"], "DY-STALLED", 5);
}

/// Exit 2 with `needle` on stderr, and nothing written.
fn assert_bad_input(args: &[&str], env: &[(&str, &str)], needle: &str) {
    let dir = tmp_dir("bad");
    let plan = dir.join("plan.json");
    let p = plan.display().to_string();
    let mut all: Vec<&str> = vec!["dynamo", "run"];
    all.extend(args);
    all.extend(["--plan-out", &p]);
    let out = kvsim(&all, env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
    assert!(!plan.exists(), "{args:?} left a plan behind");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "{args:?} left files behind"
    );
}

#[test]
fn bad_input_exits_2_and_writes_nothing() {
    assert_bad_input(
        &["--scenario", "no-such-model"],
        &[],
        "unknown scenario \"no-such-model\"",
    );
    assert_bad_input(
        &["--scenario", "llama31-8b"],
        &[("KVSIM_DYNAMO_VENV", "/nonexistent/kvsim-venv")],
        "install it with: bash conformance/dynamo/setup_venv.sh",
    );
    assert_bad_input(
        &["--scenario", "llama31-8b", "--clock-scale", "0"],
        &[],
        "--clock-scale must be > 0",
    );
}

#[test]
fn a_layout_the_real_planner_cannot_take_exits_2() {
    if !have_env("layout") {
        return;
    }
    // Groups of two block sizes: the harness builds one cache_config.block_size.
    // (Attention-DP, refused here before, is recorded now: tests/cli/dynamo_dp.rs.)
    let mut s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(scenario_file("mm-async")).unwrap()).unwrap();
    let mut g = s["scenario"]["model"]["groups"][0].clone();
    g["block_size"] = 32.into();
    s["scenario"]["model"]["groups"].as_array_mut().unwrap().push(g);
    let dir = tmp_dir("two-block-sizes");
    let file = dir.join("two-block-sizes.json");
    std::fs::write(&file, serde_json::to_vec(&s).unwrap()).unwrap();
    assert_bad_input(
        &["--scenario-file", file.to_str().unwrap()],
        &[],
        "the real planner cannot take scenario mm-async: groups with different block sizes",
    );
}

#[test]
fn a_harness_killed_mid_run_exits_2_and_writes_nothing() {
    // A stand-in environment whose "harness" kills itself: kvsim must report it,
    // not crash, and leave no half-written plan.
    let dir = tmp_dir("killed-env");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let python = which_python3();
    std::os::unix::fs::symlink(&python, dir.join("bin/python")).unwrap();
    std::fs::write(dir.join(".kvsim-ready"), "test").unwrap();
    let harness = dir.join("killer.py");
    std::fs::write(
        &harness,
        "import os, signal, sys\nout = sys.argv[sys.argv.index('--out-dir') + 1]\nos.makedirs(out, exist_ok=True)\n\
         open(os.path.join(out, 'plan.json'), 'w').write('{\"format\": ')\nos.kill(os.getpid(), signal.SIGKILL)\n",
    )
    .unwrap();
    let (venv, script) = (dir.display().to_string(), harness.display().to_string());
    assert_bad_input(
        &["--scenario", "llama31-8b"],
        &[("KVSIM_DYNAMO_VENV", &venv), ("KVSIM_DYNAMO_HARNESS", &script)],
        "the harness was killed",
    );
}

fn which_python3() -> PathBuf {
    let out = Command::new("sh").args(["-c", "command -v python3"]).output().unwrap();
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}
