//! What the real-planner suites share: the kvsim binary, the checkout, scratch
//! directories, and whether the planner's environment is installed.
#![allow(dead_code)] // each suite uses a different subset

use std::path::{Path, PathBuf};

/// The schema validation helpers of the kvsim-tests crate, shared as source (that crate depends
/// on this one, so this one cannot depend on it).
#[path = "../../src/schema.rs"]
pub mod schema;
use std::process::{Command, Output};

/// Run kvsim with `args` and extra environment variables.
pub fn kvsim_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kvsim"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("kvsim runs")
}

pub fn kvsim(args: &[&str]) -> Output {
    kvsim_with(args, &[])
}

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// A scenario file of `tests/data/dynamo/`.
pub fn scenario_file(name: &str) -> String {
    root()
        .join("tests/data/dynamo")
        .join(format!("{name}.json"))
        .display()
        .to_string()
}

/// A fresh scratch directory, unique per process and call.
pub fn tmp_dir(name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = name.replace(':', "-");
    let d = std::env::temp_dir().join(format!("kvsim-dynamo-test-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub fn venv() -> PathBuf {
    std::env::var_os("KVSIM_DYNAMO_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/kvsim/dynamo-1.6.1-vllm-0.31.0"))
}

/// Whether the environment is there; without it a test skips (or fails when
/// `KVSIM_REQUIRE_DYNAMO=1`, as `scripts/test-all` sets).
pub fn have_env(test: &str) -> bool {
    if venv().join(".kvsim-ready").is_file() {
        return true;
    }
    assert!(
        std::env::var("KVSIM_REQUIRE_DYNAMO").as_deref() != Ok("1"),
        "{test}: the real planner's environment is missing ({}); run bash conformance/dynamo/setup_venv.sh",
        venv().display()
    );
    eprintln!(
        "{test}: skipped: the real planner's environment is not installed (bash conformance/dynamo/setup_venv.sh)"
    );
    false
}
