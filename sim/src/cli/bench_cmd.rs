//! `kvsim bench-traces DIR`: replay every kvtrace in DIR `--repeat` times and
//! report ops/s (observation lines included, as vLLM's replayer produces them).
//! Wall-clock time is measured here and only here: it never reaches a trace.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use kvsim_core::kvtrace;

use super::{read_file, say, CliError};
use crate::conformance::trace_pairs;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Directory of `*.json` kvtraces (with `*.obs.jsonl` beside them).
    pub dir: PathBuf,
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
}

pub fn run(a: BenchArgs) -> Result<ExitCode, CliError> {
    let pairs = trace_pairs(&a.dir).map_err(|e| CliError::Input(format!("cannot list {}: {e}", a.dir.display())))?;
    let mut traces = Vec::with_capacity(pairs.len());
    for (t, _) in &pairs {
        let v: serde_json::Value =
            serde_json::from_str(&read_file(t)?).map_err(|e| CliError::Input(format!("{}: {e}", t.display())))?;
        traces.push(v);
    }
    // Manager only: the ops through the model, no observation lines.
    let start = Instant::now();
    let mut quiet_ops = 0usize;
    for _ in 0..a.repeat.max(1) {
        for v in &traces {
            let (config, ops) = kvtrace::split_trace(v).map_err(|e| CliError::Input(e.to_string()))?;
            let Ok(mut s) = kvtrace::Session::new(config) else {
                continue;
            };
            for op in ops {
                quiet_ops += 1;
                if s.apply_quiet(op).is_some() {
                    break;
                }
            }
        }
    }
    let quiet_secs = start.elapsed().as_secs_f64();
    // With observations: every op also renders its canonical state line.
    let start = Instant::now();
    let mut ops = 0usize;
    for _ in 0..a.repeat.max(1) {
        for v in &traces {
            ops += kvtrace::replay_value(v)
                .map_err(|e| CliError::Input(e.to_string()))?
                .ops;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    say(format_args!(
        "{{\"manager_ops_per_sec\":{:.1},\"ops\":{},\"ops_per_sec\":{:.1},\"repeat\":{},\"traces\":{}}}",
        quiet_ops as f64 / quiet_secs,
        ops / a.repeat.max(1) as usize,
        ops as f64 / secs,
        a.repeat,
        traces.len()
    ))?;
    Ok(ExitCode::SUCCESS)
}
