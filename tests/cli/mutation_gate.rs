//! The mutation gate: the default `kvsim check`, as a user runs it, passes. Run alone it is
//! the "killed by kvsim check" half of the mutation testing of docs/mutation-testing.md
//! (cargo-mutants builds each mutant and runs this test); `scripts/test-all` runs it with the
//! rest.

use std::process::Command;

#[test]
fn the_default_kvsim_check_passes() {
    let dir = std::env::temp_dir().join(format!("kvsim-mutation-gate-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_kvsim"))
        .args(["check", "--plans-dir"])
        .arg(&dir)
        .env("KVSIM_PROGRESS", "off")
        .output()
        .expect("kvsim runs");
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kvsim check failed ({:?}):\n{}\n{}",
        out.status.code(),
        stdout.lines().rev().take(12).collect::<Vec<_>>().join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("result: PASSED (700 cases, 0 failed"), "{stdout}");
}
