//! Subcommands of `kvsim`. Each lives in its own file; this one dispatches and
//! maps errors onto exit codes (2 = bad input, 1 = a check failed).

mod audit_cmd;
mod bench_cmd;
mod calibrate_cmd;
mod calibrate_host;
mod check_cmd;
mod check_dynamo;
mod compare_cmd;
mod conformance_cmd;
mod dynamo_cmd;
mod fuzz_cmd;
mod gen_cmd;
mod microbench_cmd;
mod mutants_cmd;
mod predict_cmd;
mod progress;
mod replay_cmd;
mod replay_gpu;
mod replay_prefill;
mod replay_ranks;
mod replay_symptom;
mod scenario_arg;
mod schema_cmd;
mod sweep_cmd;
mod trace_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// kvsim: simulation-first verification of KV-cache warm-up planners.
#[derive(Parser, Debug)]
#[command(name = "kvsim", version, about)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// The main job: property suites over every built-in scenario, coverage goals,
    /// and (with --mutant) the seed-bug mutants, each kill shrunk to a replayable plan.
    Check(check_cmd::CheckArgs),
    /// List the mutants: the bugs of Dynamo's warm-up PRs, block-pool model bugs and slips
    /// (spec/mutants.md).
    Mutants,
    /// Replay a kvtrace/1 file through the model and print its observation lines.
    Trace(trace_cmd::TraceArgs),
    /// Compare kvsim with reference observations for every trace in a directory.
    Conformance(conformance_cmd::ConformanceArgs),
    /// Write seeded random kvtrace/1 traces (for benchmarks and cross-checks).
    GenTraces(gen_cmd::GenArgs),
    /// Run a recorded plan on a backend; write the result (and traces).
    Replay(replay_cmd::ReplayArgs),
    /// Print the JSON Schema of a format (`--list`: every format).
    Schema(schema_cmd::SchemaArgs),
    /// List the invariant catalog.
    Invariants(schema_cmd::InvariantsArgs),
    /// Fuzz the plan and kvtrace loaders and the executor; any panic is a failure.
    Fuzz(fuzz_cmd::FuzzArgs),
    /// Run a built-in scenario's benchmark sweep on the simulator; write its artifact.
    Sweep(sweep_cmd::SweepArgs),
    /// List the built-in scenarios, one a line, name first; `--show NAME` prints one as a
    /// scenario file (a template for `--scenario-file`).
    Scenarios(sweep_cmd::ScenariosArgs),
    /// Measure kvtrace replay throughput (ops/s) over a directory of traces.
    BenchTraces(bench_cmd::BenchArgs),
    /// Predict a plan's device times on the GPU backend with the cost model (docs/timing.md).
    Predict(predict_cmd::PredictArgs),
    /// Fit the cost model's profile to GPU results; write the profile.
    Calibrate(calibrate_cmd::CalibrateArgs),
    /// Compare predictions with GPU results: MAPE, worst points, first divergence, SVG plot.
    Compare(compare_cmd::CompareArgs),
    /// The kernel microbenchmark suite: plans to calibrate the cost model per kernel family.
    #[command(subcommand)]
    Microbench(microbench_cmd::MicrobenchCommand),
    /// Dynamo's shipped planner (ai-dynamo 1.6.1 over vLLM 0.31.0) as a plan source.
    #[command(subcommand)]
    Dynamo(dynamo_cmd::DynamoCommand),
    /// Check a real Dynamo rank artifact (ai-dynamo 1.6.1) against its schema and invariants.
    Audit(audit_cmd::AuditArgs),
}

/// The command line, with negative numbers handed to the value parsers of every subcommand:
/// `--cases -1` is then a bad value, not clap's "unexpected argument '-1'".
pub fn command() -> clap::Command {
    fn negatives(c: clap::Command) -> clap::Command {
        c.allow_negative_numbers(true).mut_subcommands(negatives)
    }
    negatives(<Cli as clap::CommandFactory>::command())
}

/// Parses `args` (program name first). A negative number for an unsigned option is reported as
/// such; every parse error exits 2 (`clap::Error::exit`), `--help` and `--version` 0.
pub fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    use clap::FromArgMatches;
    let mut cmd = command();
    let matches = cmd.try_get_matches_from_mut(args).map_err(|e| {
        let context = |k| match e.get(k) {
            Some(ContextValue::String(s)) => Some(s.clone()),
            _ => None,
        };
        match (
            e.kind(),
            context(ContextKind::InvalidArg),
            context(ContextKind::InvalidValue),
        ) {
            (ErrorKind::ValueValidation, Some(arg), Some(value)) if value.starts_with('-') => {
                let flag = arg.split_whitespace().next().unwrap_or(&arg).to_string();
                cmd.error(
                    ErrorKind::ValueValidation,
                    format!("{flag} must not be negative, got {value}"),
                )
            }
            _ => e,
        }
    })?;
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

/// A command's failure, with the exit code it maps to.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad input: unreadable or malformed files, impossible configurations, bad flags.
    #[error("{0}")]
    Input(String),
    /// A check ran and failed (a divergence, a violated invariant).
    #[error("{0}")]
    Failed(String),
    /// Writing to stdout failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// The process exit code: 2 for bad input, 1 for a failed check or output.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Input(_) => 2,
            CliError::Failed(_) | CliError::Output(_) => 1,
        }
    }
}

/// Print one line to stdout, surfacing write errors (a closed pipe) instead of panicking.
pub fn say(line: impl std::fmt::Display) -> Result<(), CliError> {
    use std::io::Write;
    writeln!(std::io::stdout().lock(), "{line}")?;
    Ok(())
}

/// A file's text; an unreadable file is an input error naming it.
pub fn read_file(path: &std::path::Path) -> Result<String, CliError> {
    std::fs::read_to_string(path).map_err(|e| CliError::Input(format!("cannot read {}: {e}", path.display())))
}

/// Loads plans given with `--plan` as (plan hash, plan).
pub fn load_plans(paths: &[std::path::PathBuf]) -> Result<Vec<(String, kvsim_core::plan::Plan)>, CliError> {
    paths
        .iter()
        .map(|p| {
            let plan = kvsim_core::fpm::sweep::load_plan_checked(&read_file(p)?)
                .map_err(|e| CliError::Input(format!("{}: {e}", p.display())))?;
            Ok((kvsim_sim::exec::plan_hash(&plan), plan))
        })
        .collect()
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Check(a) => check_cmd::run(a),
        Command::Mutants => mutants_cmd::run(),
        Command::Trace(a) => trace_cmd::run(a),
        Command::Conformance(a) => conformance_cmd::run(a),
        Command::GenTraces(a) => gen_cmd::run(a),
        Command::Replay(a) => replay_cmd::run(a),
        Command::Schema(a) => schema_cmd::run(a),
        Command::Invariants(a) => schema_cmd::run_invariants(a),
        Command::Fuzz(a) => fuzz_cmd::run(a),
        Command::Sweep(a) => sweep_cmd::run(a),
        Command::Scenarios(a) => sweep_cmd::run_scenarios(a),
        Command::BenchTraces(a) => bench_cmd::run(a),
        Command::Predict(a) => predict_cmd::run(a),
        Command::Calibrate(a) => calibrate_cmd::run(a),
        Command::Compare(a) => compare_cmd::run(a),
        Command::Microbench(c) => microbench_cmd::run(c),
        Command::Dynamo(c) => dynamo_cmd::run(c),
        Command::Audit(a) => audit_cmd::run(a),
    }
}
