//! `kvsim schema plan`: the JSON Schema of a format; `kvsim invariants`: the catalog.

use std::process::ExitCode;

use clap::{Args, ValueEnum};
use kvsim_core::invariants::catalog::{render_markdown, CATALOG};
use kvsim_core::plan::Plan;

use super::{say, CliError};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    Plan,
    Artifact,
}

#[derive(Args, Debug)]
pub struct SchemaArgs {
    pub format: Format,
}

pub fn run(a: SchemaArgs) -> Result<ExitCode, CliError> {
    let schema = match a.format {
        Format::Plan => schemars::schema_for!(Plan),
        Format::Artifact => schemars::schema_for!(kvsim_core::fpm::artifact::RankArtifact),
    };
    say(serde_json::to_string_pretty(&schema).expect("schemas serialize"))?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct InvariantsArgs {
    /// Print the catalog as spec/invariants.md.
    #[arg(long)]
    pub markdown: bool,
}

pub fn run_invariants(a: InvariantsArgs) -> Result<ExitCode, CliError> {
    if a.markdown {
        print!("{}", render_markdown());
        return Ok(ExitCode::SUCCESS);
    }
    for i in CATALOG {
        say(format_args!("{:<18} {}", i.id, i.statement))?;
    }
    Ok(ExitCode::SUCCESS)
}
