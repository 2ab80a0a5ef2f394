//! The `kvsim` command line.

use std::process::ExitCode;

use clap::Parser;
use kvsim_sim::cli::{run, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kvsim: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
