//! `kvsim replay --backend gpu` end to end: without a CUDA device it exits 2 with
//! "no CUDA device: ..." (never a panic); with one, the shared-chain plan verifies and the
//! result names the backend, the device and the plan hash.

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
