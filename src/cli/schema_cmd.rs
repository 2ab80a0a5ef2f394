//! `kvsim schema NAME` / `--list`: the JSON Schema of a format (`crate::schemas`);
//! `kvsim invariants`: the catalog.

use std::process::ExitCode;

use clap::Args;
use kvsim_core::invariants::catalog::{render_markdown, CATALOG};

use super::{say, CliError};
use crate::schemas::{find, FORMATS};

#[derive(Args, Debug)]
pub struct SchemaArgs {
    /// The format (`--list` names them all).
    #[arg(required_unless_present = "list")]
    pub format: Option<String>,
    /// List every format with a line saying what it is.
    #[arg(long, conflicts_with = "format")]
    pub list: bool,
}

pub fn run(a: SchemaArgs) -> Result<ExitCode, CliError> {
    if a.list {
        for f in FORMATS {
            say(format_args!("{:<11} {}", f.name, f.description))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let name = a.format.unwrap_or_default();
    let format = find(&name).ok_or_else(|| {
        let names: Vec<&str> = FORMATS.iter().map(|f| f.name).collect();
        CliError::Input(format!("unknown format {name:?}; formats: {}", names.join(", ")))
    })?;
    say(serde_json::to_string_pretty(&format.schema()).expect("schemas serialize"))?;
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
