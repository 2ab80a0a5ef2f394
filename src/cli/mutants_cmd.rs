//! `kvsim mutants`: the seed bugs kvsim can switch back on, the model mutants and the slips.

use std::process::ExitCode;

use kvsim_core::bugs::{Site, BUGS};
use kvsim_core::kv::mutant::ModelMutant;
use kvsim_core::slips::SlipMutant;

use super::{say, CliError};

pub fn run() -> Result<ExitCode, CliError> {
    say(format_args!(
        "{:<30} {:>3}  {:<7} {:<17} cause",
        "mutant", "bug", "site", "invariant"
    ))?;
    for b in BUGS {
        let site = match b.site {
            Site::Planner => "planner",
            Site::Engine => "engine",
        };
        say(format_args!(
            "{:<30} {:>3}  {:<7} {:<17} {}",
            b.name, b.bug, site, b.invariant, b.cause
        ))?;
    }
    for m in ModelMutant::ALL {
        say(format_args!(
            "{:<30} {:>3}  {:<7} {:<17} block-pool model mutant",
            m.name(),
            "-",
            "model",
            m.breaks()
        ))?;
    }
    for s in SlipMutant::ALL {
        say(format_args!(
            "{:<30} {:>3}  {:<7} {:<17} {}",
            s.name(),
            "-",
            "slip",
            s.invariant(),
            s.cause()
        ))?;
    }
    say("seed bugs kvsim does not express, and why: spec/mutants.md")?;
    Ok(ExitCode::SUCCESS)
}
