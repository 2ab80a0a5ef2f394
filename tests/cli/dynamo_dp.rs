//! Attention data parallelism with the real synchronizer (spec/dynamo.md §2,
//! "Attention-DP"): every rank a real Dynamo 1.6.1 `InstrumentedScheduler`,
//! exchanging capacity, grid, per-point and stage-round messages over the real
//! `_BenchmarkSynchronizer` (ZMQ on loopback), stepped in lock-step by the
//! harness; the recording replays with every invariant, `PL-DP-LOCKSTEP`
//! included.
//!
//! Needs the environment `conformance/dynamo/setup_venv.sh` installs; without it
//! the suite skips, unless `KVSIM_REQUIRE_DYNAMO=1` (then it fails). The
//! bad-input test needs no environment.

mod common;

use std::path::PathBuf;
use std::process::Output;

use common::{have_env, kvsim, scenario_file, tmp_dir};

use serde_json::Value;

struct Run {
    out: Output,
    dir: PathBuf,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    fn json(&self, f: &str) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.dir.join(f)).unwrap()).unwrap()
    }
    fn bytes(&self, f: &str) -> Vec<u8> {
        std::fs::read(self.dir.join(f)).unwrap()
    }
}

/// `name` is a scenario file of tests/data/dynamo or `builtin:NAME`.
fn record(name: &str, extra: &[&str]) -> Run {
    let dir = tmp_dir(name);
    let (p, a, r) = (
        dir.join("plan.json").display().to_string(),
        dir.join("artifact.json").display().to_string(),
        dir.join("report.json").display().to_string(),
    );
    let file;
    let mut args = vec!["dynamo", "run"];
    if let Some(b) = name.strip_prefix("builtin:") {
        args.extend(["--scenario", b]);
    } else {
        file = scenario_file(name);
        args.extend(["--scenario-file", &file]);
    }
    args.extend(["--plan-out", &p, "--artifact-out", &a, "--report-out", &r]);
    args.extend(extra);
    let out = kvsim(&args);
    Run { out, dir }
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
    let report = run.json("report.json");
    assert_eq!(report["status"], "completed", "{report}");
    assert_eq!(report["replay"]["outcome"], "passed");
    let replay = kvsim(&["replay", run.dir.join("plan.json").to_str().unwrap()]);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&replay.stdout)
    );
    run
}

/// Every rank recorded every step, and every rank injected every point in the
/// same step (what PL-DP-LOCKSTEP checks on replay, read off the recording).
fn assert_lockstep(plan: &Value, ranks: u64) -> (u64, usize) {
    assert_eq!(plan["scenario"]["dp_ranks"], ranks);
    let steps = plan["steps"].as_array().unwrap();
    let per_rank = steps.len() as u64 / ranks;
    assert_eq!(steps.len() as u64, per_rank * ranks);
    for (i, s) in steps.iter().enumerate() {
        assert_eq!(s["step"], i as u64 / ranks, "steps in (step, rank) order");
        assert_eq!(s["rank"], i as u64 % ranks);
    }
    let points = plan["source"]["points"].as_array().unwrap();
    let of = |r: u64| -> Vec<(u64, u64, u64)> {
        points
            .iter()
            .filter(|p| p["rank"].as_u64().unwrap_or(0) == r)
            .map(|p| {
                (
                    p["point"].as_u64().unwrap(),
                    p["step"].as_u64().unwrap(),
                    p["batch"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert!(!of(0).is_empty());
    for r in 1..ranks {
        assert_eq!(
            of(r),
            of(0),
            "rank {r} injected other points or in other steps than rank 0"
        );
    }
    (per_rank, of(0).len())
}

fn rank_statuses(report: &Value) -> Vec<String> {
    report["dp"]["rank_reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn chain_full_attention_two_ranks_over_the_real_synchronizer() {
    if !have_env("mm-dp2") {
        return;
    }
    let run = passes("mm-dp2", &[]);
    let plan = run.json("plan.json");
    let (steps, points) = assert_lockstep(&plan, 2);
    assert!(steps > 20 && points > 0, "{steps} steps, {points} points");
    assert!(plan.get("faults").is_none(), "{}", plan["faults"]);
    let report = run.json("report.json");
    assert_eq!(rank_statuses(&report), ["completed", "completed"]);
    assert_eq!(report["dp"]["resolved_ranks"], serde_json::json!([0, 1]));
    let t = &report["dp"]["transport"];
    assert!(t["messages"].as_u64().unwrap() > 0, "{t}");
    assert_eq!(t["protocol_timeouts"], serde_json::json!([]), "{t}");
    assert_eq!(t["stall_ticks"], 0, "{t}");
    // Every point borrowed a chain: 1.6.1 measures real-KV points only under DP.
    let art = run.json("artifact.json");
    assert_eq!(art["dp"]["size"], 2);
    assert_eq!(art["status"], "complete");
    assert!(run.dir.join("artifact.json").is_file());
}

#[test]
fn synthetic_window_4_inkling_two_ranks_built_in() {
    if !have_env("inkling-tp4-dp2") {
        return;
    }
    let run = passes("builtin:inkling-tp4-dp2", &[]);
    assert_lockstep(&run.json("plan.json"), 2);
}

#[test]
fn two_ranks_same_bytes() {
    if !have_env("dp-determinism") {
        return;
    }
    for extra in [&[][..], &["--message-lag", "1:2"][..]] {
        let a = record("mm-dp2", extra);
        let b = record("mm-dp2", extra);
        for f in ["plan.json", "artifact.json", "report.json"] {
            assert_eq!(a.bytes(f), b.bytes(f), "{f} differs between two runs ({extra:?})");
        }
    }
}

/// 1.6.1's exchanges all block: a lagging channel stalls the whole group in
/// every exchange (virtual time passes, no step does), so every rank still
/// injects every point in the same step and the replay passes.
#[test]
fn a_lagging_channel_stalls_the_group_and_keeps_it_in_lockstep() {
    if !have_env("message-lag") {
        return;
    }
    let base = passes("mm-dp2", &[]);
    for (rank, lag) in [(1u64, 2u64), (0, 3)] {
        let arg = format!("{rank}:{lag}");
        let run = passes("mm-dp2", &["--message-lag", &arg]);
        let plan = run.json("plan.json");
        assert_lockstep(&plan, 2);
        assert_eq!(
            plan["faults"],
            serde_json::json!([{"fault": "message_lag", "rank": rank, "steps": lag}])
        );
        // Same injections in the same steps as without the lag.
        assert_eq!(plan["source"]["points"], base.json("plan.json")["source"]["points"]);
        let t = &run.json("report.json")["dp"]["transport"];
        let lagged = t["lagged_messages"].as_u64().unwrap();
        assert!(lagged > 0, "{t}");
        // Each lagged message is waited for in full: the group stalls `lag` ticks.
        assert_eq!(t["stall_ticks"].as_u64().unwrap(), lagged * lag, "{t}");
        assert_eq!(t["protocol_timeouts"], serde_json::json!([]), "{t}");
    }
}

/// A lag past the synchronizer's protocol timeout (10 s; 20,000 ticks of 1 ms):
/// the capacity round times out on the virtual clock, every rank raises.
#[test]
fn a_lag_past_the_protocol_timeout_is_a_finding() {
    if !have_env("message-lag-timeout") {
        return;
    }
    let run = record("mm-dp2", &["--message-lag", "1:20000"]);
    let stdout = run.stdout();
    assert_eq!(run.out.status.code(), Some(1), "{stdout}");
    let report = run.json("report.json");
    assert_eq!(report["replay"]["invariant"], "DY-RAISED", "{report}");
    assert_eq!(report["replay"]["step"], 0);
    assert_eq!(report["status"], "raised");
    assert_eq!(rank_statuses(&report), ["raised", "raised"]);
    assert!(
        report["error"].as_str().unwrap().contains("TimeoutError"),
        "{}",
        report["error"]
    );
    let t = &report["dp"]["transport"];
    assert!(!t["protocol_timeouts"].as_array().unwrap().is_empty(), "{t}");
}

/// A smaller free pool on one rank when the planner sizes its stages: 1.6.1
/// negotiates the group's capacity, so the recording replays exactly (the
/// fault recorded on its rank); the seed-bug patch that sizes stages from the
/// local pool gives the ranks different grids (§8.2 bug 17).
#[test]
fn a_smaller_pool_on_one_rank_is_negotiated_away() {
    if !have_env("shrink-pool") {
        return;
    }
    let run = passes("mm-dp2", &["--shrink-pool", "0:1:1500"]);
    let plan = run.json("plan.json");
    assert_lockstep(&plan, 2);
    assert_eq!(
        plan["faults"],
        serde_json::json!([{"fault": "shrink_pool", "step": 0, "rank": 1, "blocks": 1500}])
    );
    let bug = record(
        "mm-dp2",
        &["--shrink-pool", "0:1:1500", "--mutant", "per-rank-capacity"],
    );
    assert_eq!(bug.out.status.code(), Some(1), "{}", bug.stdout());
    let report = bug.json("report.json");
    assert_eq!(report["replay"]["invariant"], "DY-RAISED", "{report}");
    assert!(
        report["error"].as_str().unwrap().contains("grid mismatch"),
        "{}",
        report["error"]
    );
}

/// Rank 1's pool shrinks as the batch-8 rung's build closes (step 22, where
/// 1.6.1 checks that the rung's shadow tails fit): a local stage failure. The
/// blocking group verdict fails the stage on both ranks (4 of 6 points each, in
/// lock-step); the seed-bug patches that settle it locally (§8.2 bug 15) or skip
/// the exchange (bug 22) fork the ranks.
#[test]
fn a_shortfall_on_one_rank_as_a_build_closes_fails_the_stage_for_the_group() {
    if !have_env("stage-shortfall") {
        return;
    }
    let shrink = ["--shrink-pool", "22:1:945"];
    let run = passes("mm-dp2", &shrink);
    assert_lockstep(&run.json("plan.json"), 2);
    assert_eq!(
        run.json("report.json")["points"],
        4,
        "rank 0 measures 4 of its 6 points"
    );
    for (mutant, error) in [
        ("local-stage-verdict", "not in lockstep"),
        ("nonblocking-stage-exchange", "TimeoutError"),
    ] {
        let bug = record("mm-dp2", &[&shrink[..], &["--mutant", mutant]].concat());
        assert_eq!(bug.out.status.code(), Some(1), "{mutant}: {}", bug.stdout());
        let report = bug.json("report.json");
        assert_eq!(report["replay"]["invariant"], "DY-RAISED", "{mutant}: {report}");
        assert!(
            report["error"].as_str().unwrap().contains(error),
            "{mutant}: {}",
            report["error"]
        );
    }
}

#[test]
fn message_lag_needs_an_attention_dp_rank() {
    for (args, needle) in [
        (
            vec!["--scenario-file", "MM_ASYNC", "--message-lag", "0:1"],
            "needs an attention-DP scenario",
        ),
        (
            vec!["--scenario-file", "MM_DP2", "--message-lag", "2:1"],
            "it has 2 ranks",
        ),
        (vec!["--scenario-file", "MM_DP2", "--message-lag", "1"], "expected A:B"),
    ] {
        let (async_file, dp2_file) = (scenario_file("mm-async"), scenario_file("mm-dp2"));
        let args: Vec<&str> = args
            .iter()
            .map(|a| match *a {
                "MM_ASYNC" => async_file.as_str(),
                "MM_DP2" => dp2_file.as_str(),
                a => a,
            })
            .collect();
        let dir = tmp_dir("bad-lag");
        let plan = dir.join("plan.json");
        let p = plan.display().to_string();
        let mut all = vec!["dynamo", "run"];
        all.extend(&args);
        all.extend(["--plan-out", &p]);
        let out = kvsim(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(!plan.exists());
    }
}
