//! `kvsim conformance DIR`: replay every trace in DIR and compare with the
//! reference observations beside it; print the first divergent op of each.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use kvsim_sim::conformance::{compare_counted, trace_pairs};

use super::{read_file, say, CliError};

#[derive(Args, Debug)]
pub struct ConformanceArgs {
    /// Directory of `X.json` traces with `X.obs.jsonl` reference observations.
    pub dir: PathBuf,
    /// Fail unless at least this many traces were compared.
    #[arg(long, default_value_t = 1)]
    pub min_traces: usize,
    /// Fail unless some trace makes the hybrid coordinator's fixed point re-ask a group at a
    /// shorter length (a later group shortening an earlier one's hit; a coverage goal).
    #[arg(long)]
    pub require_fixed_point: bool,
}

pub fn run(a: ConformanceArgs) -> Result<ExitCode, CliError> {
    let pairs = trace_pairs(&a.dir).map_err(|e| CliError::Input(format!("cannot list {}: {e}", a.dir.display())))?;
    let mut divergent = 0usize;
    let (mut reask_traces, mut reasks) = (0usize, 0u64);
    for (trace, obs) in &pairs {
        let (t, o) = (read_file(trace)?, read_file(obs)?);
        let (divergence, n) =
            compare_counted(trace, &t, &o).map_err(|e| CliError::Input(format!("{}: {e}", trace.display())))?;
        reask_traces += usize::from(n > 0);
        reasks += n;
        match divergence {
            None => {}
            Some(d) => {
                divergent += 1;
                if divergent <= 5 {
                    say(format_args!(
                        "DIVERGENCE {} at observation line {} (op index {})",
                        d.trace.display(),
                        d.line,
                        d.line as i64 - 1
                    ))?;
                    say(format_args!("  vllm : {}", d.expected))?;
                    say(format_args!("  kvsim: {}", d.actual))?;
                }
            }
        }
    }
    say(format_args!(
        "conformance: {} traces compared, {} divergent",
        pairs.len(),
        divergent
    ))?;
    say(format_args!(
        "coverage: the hybrid fixed point re-asked a group at a shorter length {reasks} times in {reask_traces} traces"
    ))?;
    if divergent > 0 {
        return Err(CliError::Failed(format!(
            "{divergent} of {} traces diverge from vLLM",
            pairs.len()
        )));
    }
    if a.require_fixed_point && reasks == 0 {
        return Err(CliError::Failed(
            "coverage goal missed: no trace made the hybrid fixed point re-ask a group".into(),
        ));
    }
    if pairs.len() < a.min_traces {
        return Err(CliError::Failed(format!(
            "only {} traces found, at least {} required",
            pairs.len(),
            a.min_traces
        )));
    }
    Ok(ExitCode::SUCCESS)
}
