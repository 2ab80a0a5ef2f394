//! Where the real planner's environment and harness live.

use std::path::{Path, PathBuf};

/// The installer that builds the environment (cached under `~/.cache/kvsim`).
pub const INSTALL_COMMAND: &str = "bash conformance/dynamo/setup_venv.sh";

/// The venv directory: `$KVSIM_DYNAMO_VENV`, else the installer's default.
pub fn venv_dir() -> PathBuf {
    if let Some(v) = std::env::var_os("KVSIM_DYNAMO_VENV") {
        return PathBuf::from(v);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache/kvsim/dynamo-1.6.1-vllm-0.31.0")
}

/// The venv's python, if the installer finished (its marker is written last).
pub fn ready_python() -> Option<PathBuf> {
    let dir = venv_dir();
    let python = dir.join("bin/python");
    (dir.join(".kvsim-ready").is_file() && python.is_file()).then_some(python)
}

/// The harness script: `$KVSIM_DYNAMO_HARNESS`, else the checkout's copy.
pub fn harness_script() -> PathBuf {
    if let Some(v) = std::env::var_os("KVSIM_DYNAMO_HARNESS") {
        return PathBuf::from(v);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/dynamo/harness.py")
}
