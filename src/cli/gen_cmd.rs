//! `kvsim gen-traces`: write seeded random kvtrace/1 files (kvtrace-format.md §5 layouts).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use kvsim_core::kvtrace::gen;

use super::CliError;
use kvsim_sim::output::write_atomic;

#[derive(Args, Debug)]
pub struct GenArgs {
    /// Seed of the generator; the same seed gives byte-identical files.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// How many traces to write.
    #[arg(long, default_value_t = 100)]
    pub count: usize,
    /// Index of the first trace (layouts are round-robin by index).
    #[arg(long, default_value_t = 0)]
    pub start: usize,
    /// Output directory (created if missing).
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: GenArgs) -> Result<ExitCode, CliError> {
    std::fs::create_dir_all(&a.out).map_err(|e| CliError::Input(format!("cannot create {}: {e}", a.out.display())))?;
    for index in a.start..a.start + a.count {
        let trace = gen::generate(a.seed, index);
        let path = a.out.join(format!("kvsim_{index:05}.json"));
        let text = serde_json::to_string(&trace).expect("a Value serializes");
        write_atomic(&path, text.as_bytes())
            .map_err(|e| CliError::Input(format!("cannot write {}: {e}", path.display())))?;
    }
    eprintln!("wrote {} traces to {}", a.count, a.out.display());
    Ok(ExitCode::SUCCESS)
}
