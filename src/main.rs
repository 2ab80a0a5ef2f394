//! The `kvsim` command line.

use std::process::ExitCode;

use kvsim_cli::cli::{parse, run};

#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = parse(std::env::args_os()).unwrap_or_else(|e| e.exit());
    match run(cli) {
        Ok(code) => code,
        // A closed pipe (`kvsim ... | head`) is not an error worth reporting.
        Err(kvsim_cli::cli::CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kvsim: error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
