//! `kvsim replay --backend gpu` end to end: without a CUDA device it exits 2 with
//! "no CUDA device: ..." (never a panic); with one, the shared-chain plan verifies and the
//! result names the backend, the device and the plan hash. With `--devices N` (issue 23) the
//! flags are checked before the device, and `kvsim predict --devices N` models the lock-step.

use std::path::Path;
use std::process::Command;

mod common;

#[test]
fn gpu_replay_needs_a_device_or_verifies() {
    let plan = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/plans/shadow_decode.json");
    let out_file = std::env::temp_dir().join(format!("kvsim-gpu-replay-{}.json", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["replay", plan.to_str().unwrap(), "--backend", "gpu", "--out"])
        .arg(&out_file)
        .output()
        .expect("kvsim runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match kvsim_gpu::device::skip_without_device("gpu_replay_needs_a_device_or_verifies") {
        true => {
            assert_eq!(out.status.code(), Some(2), "{stderr}");
            assert!(stderr.contains("no CUDA device: "), "{stderr}");
            assert!(!stderr.contains("panicked"), "{stderr}");
            assert!(!out_file.exists());
        }
        false => {
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            let result: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
            common::schema::assert_valid("replay-gpu", "replay --backend gpu --out", &result);
            assert_eq!(result["backend"], "gpu");
            assert_eq!(result["verification"]["passed"], true);
            assert!(result["device"]["name"].is_string());
            assert_eq!(result["plan_hash"].as_str().map(str::len), Some(32));
            let _ = std::fs::remove_file(&out_file);
        }
    }
}

fn dp2_plan() -> String {
    common::root()
        .join("tests/data/plans/shadow_decode_dp2.json")
        .display()
        .to_string()
}

#[test]
fn devices_flags_are_checked_before_the_device() {
    let plan = dp2_plan();
    let out = std::env::temp_dir().join(format!("kvsim-ranks-bad-{}.json", std::process::id()));
    let out = out.to_str().unwrap();
    for (args, says) in [
        (
            vec!["--backend", "gpu", "--devices", "0"],
            "--devices must be at least 1",
        ),
        (
            vec!["--backend", "gpu", "--devices", "3"],
            "--devices 3 but the plan has 2 attention-DP ranks",
        ),
        (
            vec!["--backend", "gpu", "--devices", "1", "--lag-step-us=-1"],
            "--lag-step-us must be",
        ),
        (
            vec!["--backend", "gpu", "--exchange", "host"],
            "--exchange and --lag-step-us go with --devices",
        ),
        (vec!["--devices", "1"], "are for the gpu backend"),
    ] {
        let mut a = vec!["replay", plan.as_str(), "--out", out];
        a.extend(args.iter().copied());
        let o = common::kvsim(&a);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn ranks_replay_needs_a_device_or_verifies_in_lock_step() {
    let plan = dp2_plan();
    let out_file = std::env::temp_dir().join(format!("kvsim-ranks-{}.json", std::process::id()));
    let o = common::kvsim(&[
        "replay",
        &plan,
        "--backend",
        "gpu",
        "--devices",
        "1",
        "--lag-step-us",
        "500",
        "--out",
        out_file.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    if kvsim_gpu::device::skip_without_device("ranks_replay_needs_a_device_or_verifies_in_lock_step") {
        assert_eq!(o.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("no CUDA device: "), "{stderr}");
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out_file).unwrap()).unwrap();
    common::schema::assert_valid("replay-gpu", "replay --backend gpu --devices 1", &v);
    assert_eq!(v["verification"]["passed"], true);
    let r = &v["ranks"];
    assert_eq!(
        (r["ranks"].as_u64(), r["device_of_rank"].clone()),
        (Some(2), serde_json::json!([0, 0]))
    );
    assert_eq!(r["exchange_verified"], true);
    assert_eq!(r["message_lag_steps"], serde_json::json!([0, 1]));
    for s in r["steps"].as_array().unwrap() {
        // Rank 1 lags 500 µs at every step; rank 0 waits for it.
        assert_eq!(s["rank_lag_us"][1].as_f64(), Some(500.0));
        assert!(s["rank_wait_us"][0].as_f64().unwrap() >= 250.0, "{s}");
        assert!(s["skew_us"].as_f64().unwrap() >= 250.0, "{s}");
    }
    let _ = std::fs::remove_file(&out_file);
}

#[test]
fn predict_models_the_lock_step_and_the_lag() {
    let plan = dp2_plan();
    let out_file = std::env::temp_dir().join(format!("kvsim-ranks-predict-{}.json", std::process::id()));
    let out = out_file.to_str().unwrap();
    let o = common::kvsim(&[
        "predict",
        &plan,
        "--out",
        out,
        "--devices",
        "2",
        "--exchange-us",
        "20",
        "--lag-step-us",
        "300",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    common::schema::assert_valid("predict", "predict --devices 2", &v);
    let r = &v["ranks"];
    assert_eq!(r["device_of_rank"], serde_json::json!([0, 1]));
    let mut lagged = 0;
    for s in r["steps"].as_array().unwrap() {
        let f = |k: &str, i: usize| s[k][i].as_f64().unwrap();
        // Rank 1 is 300 µs late on top of its own work; the step ends when the later rank
        // arrives, plus the exchange.
        let busy = [f("rank_device_us", 0), f("rank_device_us", 1) + 300.0];
        let hi = busy[0].max(busy[1]);
        for (i, b) in busy.iter().enumerate() {
            assert!((f("rank_busy_us", i) - b).abs() < 1e-3, "{s}");
            assert!((f("rank_wait_us", i) - (hi - b + 20.0)).abs() < 1e-3, "{s}");
        }
        assert!(
            (s["skew_us"].as_f64().unwrap() - (busy[1] - busy[0]).abs()).abs() < 1e-3,
            "{s}"
        );
        assert!((s["step_us"].as_f64().unwrap() - (hi + 20.0)).abs() < 1e-3, "{s}");
        lagged += usize::from(busy[1] > busy[0]);
    }
    assert!(lagged > 0);
    // On one device the ranks share it: each takes both ranks' time.
    let o = common::kvsim(&["predict", &plan, "--out", out, "--devices", "1"]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    let s = &v["ranks"]["steps"][2];
    let busy0 = s["rank_busy_us"][0].as_f64().unwrap();
    let dev = s["rank_device_us"][0].as_f64().unwrap() + s["rank_device_us"][1].as_f64().unwrap();
    assert!((busy0 - dev).abs() < 1e-3, "{s}");
    let o = common::kvsim(&["predict", &plan, "--out", out, "--devices", "3"]);
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_file(&out_file);
}
