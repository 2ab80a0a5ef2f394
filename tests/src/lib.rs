//! Shared helpers for kvsim integration tests: small hand-made plans. The builders are
//! kvsim's library API (`kvsim_sim::api`); these names are the tests' shorthand.

pub mod schema;

use std::path::{Path, PathBuf};

use serde_json::Value;

pub use kvsim_sim::api::{prefill_ops as prefill, tiny_scenario as scenario, token_ids as ids};

/// The repository's root (the workspace these tests belong to).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A fresh temporary folder `label-PID` with the named archives of `docs/timing/data` (committed
/// GPU runs, `NAME.tar.xz`) unpacked in it.
pub fn unpacked_timing_data(label: &str, archives: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for a in archives {
        let archive = repo_root().join("docs/timing/data").join(a);
        let untar = std::process::Command::new("tar")
            .arg("-xJf")
            .arg(&archive)
            .arg("-C")
            .arg(&dir)
            .status()
            .expect("tar (with xz) unpacks the committed measurements");
        assert!(untar.success(), "tar -xJf {} failed", archive.display());
    }
    dir
}

/// A committed prediction, `docs/timing/REL.pred.json.xz` (kept xz-compressed: the device tool
/// carries the whole checkout), unpacked into `dir` as `NAME.pred.json`; returns that path.
pub fn committed_prediction(rel: &str, dir: &Path) -> PathBuf {
    let src = repo_root().join(format!("docs/timing/{rel}.pred.json.xz"));
    let name = Path::new(rel)
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned();
    let out = dir.join(format!("{name}.pred.json"));
    let xz = std::process::Command::new("xz")
        .arg("-dc")
        .arg(&src)
        .output()
        .expect("xz unpacks the committed predictions");
    assert!(xz.status.success(), "xz -dc {} failed", src.display());
    std::fs::write(&out, xz.stdout).unwrap();
    out
}

/// A profile's `params` as a file written before some parameters existed holds them: each
/// parameter added since (`ADDED_ZERO_PARAMS`) that `committed` lacks and `params` holds at 0
/// (what such a file loads as) is dropped, so the two compare as JSON.
pub fn params_as_committed(params: &Value, committed: &Value) -> Value {
    use kvsim_sim::cost::profile::ADDED_ZERO_PARAMS;
    let mut out = params.clone();
    if let Some(map) = out.as_object_mut() {
        map.retain(|k, v| committed.get(k).is_some() || !(ADDED_ZERO_PARAMS.contains(&k.as_str()) && *v == 0.0));
    }
    out
}

/// Runs `kvsim ARGS` in-process: 0 on success, 1 on a failed check, the typed error otherwise
/// (its `exit_code()` is what the binary would exit with).
pub fn run_cli(args: &[&str]) -> Result<u8, kvsim_cli::cli::CliError> {
    use clap::Parser;
    let mut argv = vec!["kvsim"];
    argv.extend_from_slice(args);
    let cli = kvsim_cli::cli::Cli::try_parse_from(argv).map_err(|e| kvsim_cli::cli::CliError::Input(e.to_string()))?;
    kvsim_cli::cli::run(cli).map(|code| if code == std::process::ExitCode::SUCCESS { 0 } else { 1 })
}

/// A plan from a scenario and `[step, rank, [ops...]]` triples.
pub fn plan(scenario: Value, steps: Vec<(u64, u32, Vec<Value>)>) -> Value {
    steps
        .into_iter()
        .fold(kvsim_sim::api::PlanBuilder::new(scenario), |b, (s, r, ops)| {
            b.step(s, r, ops)
        })
        .to_json()
}
