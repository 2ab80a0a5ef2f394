//! `kvsim audit FILE [--json]`: check a real Dynamo rank artifact (ai-dynamo 1.6.1,
//! `schema_version` 2) against its schema and the artifact-level invariants
//! (`spec/dynamo-artifact.md`). One line per finding, then a summary; exit 0 when no check fails
//! (warnings allowed), 1 when one does (a failed run included), 2 when the file cannot be read or
//! is not a JSON object.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use kvsim_core::fpm::audit::{self, Finding, Report, Severity};
use serde::Serialize;

use super::{read_file, say, CliError};

#[derive(Args, Debug)]
pub struct AuditArgs {
    /// A rank artifact as ai-dynamo 1.6.1's InstrumentedScheduler writes it.
    pub file: PathBuf,
    /// Print the report as one JSON object instead of lines.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    file: String,
    passed: bool,
    errors: usize,
    warnings: usize,
    schema_ok: bool,
    consistency_checked: bool,
    status: Option<&'a str>,
    findings: &'a [Finding],
}

fn severity(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
}

fn summary(file: &str, r: &Report) -> String {
    let structure = if r.schema_ok {
        "schema ok"
    } else {
        "schema errors, consistency checks skipped"
    };
    format!(
        "audit {file}: {} ({} error(s), {} warning(s); status {}; {structure}; {} checks)",
        if r.passed() { "pass" } else { "fail" },
        r.errors(),
        r.warnings(),
        r.status.as_deref().unwrap_or("unknown"),
        audit::CHECKS.len()
    )
}

pub fn run(a: AuditArgs) -> Result<ExitCode, CliError> {
    let file = a.file.display().to_string();
    let text = read_file(&a.file)?;
    let v = audit::parse(&text).map_err(|e| CliError::Input(format!("{file}: {e}")))?;
    let report = audit::audit(&v);
    if a.json {
        let j = JsonReport {
            file: file.clone(),
            passed: report.passed(),
            errors: report.errors(),
            warnings: report.warnings(),
            schema_ok: report.schema_ok,
            consistency_checked: report.consistency_checked,
            status: report.status.as_deref(),
            findings: &report.findings,
        };
        say(serde_json::to_string_pretty(&j).expect("reports serialize"))?;
    } else {
        for f in &report.findings {
            say(format_args!(
                "{:<7} {:<18} {}: {}",
                severity(f.severity),
                f.id,
                f.path,
                f.message
            ))?;
        }
        say(summary(&file, &report))?;
    }
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
