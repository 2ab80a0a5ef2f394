//! `kvsim trace FILE`: print the observation lines of a kvtrace/1 replay.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use kvsim_core::kvtrace::{self, ReplayEnd};

use super::{read_file, CliError};

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// The kvtrace/1 JSON file.
    pub file: PathBuf,
    /// Replay the file this many times and report ops/s on stderr (benchmark mode).
    #[arg(long, value_name = "N")]
    pub bench: Option<u32>,
}

pub fn run(a: TraceArgs) -> Result<ExitCode, CliError> {
    let text = read_file(&a.file)?;
    let bad = |e: kvtrace::TraceError| CliError::Input(format!("{}: {e}", a.file.display()));
    if let Some(n) = a.bench {
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(kvtrace::TraceError::Json(e.to_string())))?;
        let start = std::time::Instant::now();
        let mut ops = 0usize;
        for _ in 0..n.max(1) {
            ops += kvtrace::replay_value(&v).map_err(bad)?.ops;
        }
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "{{\"ops\":{ops},\"seconds\":{secs:.6},\"ops_per_sec\":{:.1}}}",
            ops as f64 / secs
        );
        return Ok(ExitCode::SUCCESS);
    }
    let replay = kvtrace::replay(&text).map_err(bad)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for line in &replay.lines {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    // Exit 0: replayed to the end; 1: the trace stopped at an error line (printed).
    Ok(match replay.end {
        ReplayEnd::Completed => ExitCode::SUCCESS,
        ReplayEnd::Stopped { .. } => ExitCode::from(1),
    })
}
