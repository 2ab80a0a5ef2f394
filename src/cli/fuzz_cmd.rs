//! `kvsim fuzz`: robustness fuzzing of the plan and kvtrace loaders and the executor.

use std::process::ExitCode;

use clap::Args;

use super::{say, CliError};
use kvsim_sim::fuzz::fuzz_with;

#[derive(Args, Debug)]
pub struct FuzzArgs {
    #[arg(long, default_value_t = 100_000)]
    pub iterations: u64,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn run(a: FuzzArgs) -> Result<ExitCode, CliError> {
    // Panics are caught and reported as findings; keep the default hook quiet.
    std::panic::set_hook(Box::new(|_| {}));
    let mut bar = super::progress::Progress::new("fuzz", "inputs");
    let s = fuzz_with(a.seed, a.iterations, &mut |done, total| bar.update(done, total));
    bar.finish();
    let _ = std::panic::take_hook();
    say(format_args!(
        "fuzz: {} inputs, {} plans accepted, {} ran clean, {} kvtraces replayed, {} panics",
        s.iterations,
        s.plans_accepted,
        s.plans_executed_clean,
        s.traces_replayed,
        s.crashes.len()
    ))?;
    for c in s.crashes.iter().take(3) {
        let shown: String = c.input.chars().take(400).collect();
        say(format_args!(
            "PANIC at iteration {} ({}): {}\n  input (first 400 chars): {shown}",
            c.iteration, c.target, c.message
        ))?;
    }
    if s.crashes.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError::Failed(format!("{} inputs panicked", s.crashes.len())))
    }
}
