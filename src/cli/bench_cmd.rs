//! `kvsim bench-traces DIR`: replay every kvtrace in DIR `--repeat` times and
//! report ops/s, through the model alone and with observation lines.
//! Wall-clock time is measured here and only here: it never reaches a trace.
//!
//! Measured like vLLM's side (`conformance/bench_manager.py`), which parses the
//! JSON before its clock starts: here only reading the files happens before
//! the clock. kvsim's compile (the trace text parsed and compiled into ops in
//! one pass, fields checked, ids interned) is timed on its own as
//! `compile_ops_per_sec`; until 2026-12-03 serde_json parsed the text before
//! the clock and only compiling its tree was timed. Building each trace's
//! model is timed on both sides (kvsim builds each one in the storage the
//! previous trace's model left, reset to a fresh model). After one untimed
//! warm-up pass, each rate is total ops over total time; `best_*` is the
//! fastest single pass (the least disturbed by other load on the machine).
//! Compiling is timed the same way (warm-up, then `repeat` passes, each
//! compiling every trace afresh); before 2026-12-03 it was one cold pass.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use kvsim_core::kvtrace::{self, CompiledTrace, ReplayStorage};

use super::{read_file, say, CliError};
use kvsim_sim::conformance::trace_pairs;

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Directory of `*.json` kvtraces (with `*.obs.jsonl` beside them).
    pub dir: PathBuf,
    #[arg(long, default_value_t = 3)]
    pub repeat: u32,
}

/// Ops per second over `repeat` passes of `pass` (which returns its op count),
/// after one untimed warm-up pass: (overall, fastest pass, ops per pass).
fn rate(repeat: u32, mut pass: impl FnMut() -> usize) -> (f64, f64, usize) {
    pass();
    let (mut ops, mut secs, mut best) = (0usize, 0f64, 0f64);
    for _ in 0..repeat {
        let start = Instant::now();
        let n = pass();
        let s = start.elapsed().as_secs_f64();
        ops += n;
        secs += s;
        best = best.max(n as f64 / s);
    }
    (ops as f64 / secs, best, ops / repeat as usize)
}

pub fn run(a: BenchArgs) -> Result<ExitCode, CliError> {
    let pairs = trace_pairs(&a.dir).map_err(|e| CliError::Input(format!("cannot list {}: {e}", a.dir.display())))?;
    let texts = pairs
        .iter()
        .map(|(t, _)| read_file(t))
        .collect::<Result<Vec<String>, _>>()?;
    let repeat = a.repeat.max(1);
    let compile_all = || {
        texts
            .iter()
            .map(|t| kvtrace::compile_text(t))
            .collect::<Result<Vec<CompiledTrace>, _>>()
    };
    let traces = texts
        .iter()
        .zip(&pairs)
        .map(|(text, (t, _))| kvtrace::compile_text(text).map_err(|e| CliError::Input(format!("{}: {e}", t.display()))))
        .collect::<Result<Vec<CompiledTrace>, _>>()?;
    // Compiling is timed like the replays (warm-up, then `repeat` passes); each pass
    // compiles every trace afresh and drops the result.
    let (compile, _, _) = rate(repeat, || {
        compile_all().map_or(0, |ts| ts.iter().map(CompiledTrace::num_ops).sum())
    });
    // Manager only: the ops through the model, no observation lines.
    // Each trace's model is built afresh in the storage the previous one left.
    let mut storage = ReplayStorage::default();
    let (quiet, quiet_best, _) = rate(repeat, || {
        traces.iter().map(|t| t.run_quiet_reusing(&mut storage)).sum()
    });
    // With observations: every op also renders its canonical state line; the
    // byte count keeps the lines from being optimised away.
    let mut bytes = 0usize;
    let (full, full_best, ops) = rate(repeat, || {
        bytes = 0;
        let mut n = 0;
        for t in &traces {
            n += t.run(|line| bytes += line.len() + 1).1;
        }
        n
    });
    say(format_args!(
        "{{\"best_manager_ops_per_sec\":{quiet_best:.1},\"best_ops_per_sec\":{full_best:.1},\
         \"compile_ops_per_sec\":{:.1},\"line_bytes\":{},\"manager_ops_per_sec\":{quiet:.1},\"ops\":{ops},\
         \"ops_per_sec\":{full:.1},\"repeat\":{repeat},\"traces\":{}}}",
        compile,
        bytes,
        traces.len()
    ))?;
    Ok(ExitCode::SUCCESS)
}
