//! `kvsim dynamo run`: record Dynamo's shipped planner (ai-dynamo 1.6.1 over
//! vLLM 0.31.0, on CPU) over a scenario as a kvsim plan, and replay it on the
//! simulator with every invariant and every recorded table checked.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use kvsim_core::fpm::scenarios::validate_scenario;

use super::{say, CliError};
use kvsim_core::fpm::gate::{gate, Strategy};
use kvsim_core::fpm::sweep::SweepOptions;
use kvsim_sim::dynamo::diff::{compare, Facts};
use kvsim_sim::dynamo::mutants::{patched_copy, select};
use kvsim_sim::dynamo::{audit_error, record, temp_dir, RecordError, RecordOptions, Recording};
use kvsim_sim::exec::{run_plan, Outcome, RunReport};
use kvsim_sim::output::write_atomic;
use kvsim_sim::sweep::run_sweep_with;

#[derive(Subcommand, Debug)]
pub enum DynamoCommand {
    /// Run the real planner over a scenario; write its plan and its artifact; replay the plan.
    Run(RunArgs),
    /// Run kvsim's port and the real planner on one scenario; compare grid points, regimes,
    /// order, stages, capacity fallbacks and ops; print the first divergence of each.
    Diff(DiffArgs),
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Also write the comparison as JSON.
    #[arg(long)]
    pub json_out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ScenarioArgs {
    /// A built-in scenario name (`kvsim scenarios`).
    #[arg(long, required_unless_present = "scenario_file")]
    pub scenario: Option<String>,
    /// A scenario file (the format `kvsim sweep --scenario-file` takes).
    #[arg(long, conflicts_with = "scenario")]
    pub scenario_file: Option<PathBuf>,
    /// Run this working copy of `instrumented_scheduler.py` instead of the installed 1.6.1 module.
    #[arg(long)]
    pub planner_source: Option<PathBuf>,
    /// Turn Dynamo's KV warm-up off (`DYN_BENCH_KV_WARMUP=off`): synthetic KV only.
    #[arg(long)]
    pub no_warmup: bool,
    /// `hybrid_live_state` on (recurrent groups fork the chain's live state).
    #[arg(long)]
    pub live_state: bool,
    /// Override the scenario's soft timeout (seconds on the planner's virtual clock).
    #[arg(long)]
    pub timeout_seconds: Option<u64>,
    /// Virtual seconds per nominal step second (steps cost 1 ms + 20 ns per token at 1.0).
    #[arg(long, default_value_t = 1.0)]
    pub clock_scale: f64,
    /// A sweep still running after this many steps is a finding (DY-STALLED).
    #[arg(long, default_value_t = 20_000)]
    pub max_steps: u64,
    /// Wall-clock seconds before the harness is killed (exit 2, nothing written).
    #[arg(long, default_value_t = 900)]
    pub harness_timeout: u64,
    /// STEP:BY — async only: from STEP, BY more batches stay in flight for BY steps
    /// (a pipelined engine's batch queue), then their outputs land together.
    #[arg(long, value_parser = parse_pair)]
    pub delay_outputs: Option<(u64, u64)>,
    /// RANK:STEPS — attention-DP only: RANK's synchronizer messages reach their peer
    /// STEPS lock-step steps late (a lagging channel; recorded as a `message_lag` fault).
    #[arg(long, value_parser = parse_pair)]
    pub message_lag: Option<(u64, u64)>,
    /// Async only: the scheduler's `defer_block_free` on, as vLLM sets it with a
    /// KV-consumer connector (a disaggregated decode worker): frees of requests whose
    /// step is in flight wait behind the deferred-free fence.
    #[arg(long)]
    pub defer_block_free: bool,
    /// STEP — before STEP's schedule every live warm-up chain is aborted
    /// (`finish_requests(FINISHED_ABORTED)`, a request the engine lost; recorded as `abort` faults).
    #[arg(long)]
    pub abort_chains: Option<u64>,
    /// STEP:RANK:BLOCKS[:STEPS] — before STEP's schedule, BLOCKS free blocks of
    /// RANK's pool become unusable for the rest of the run (a rank whose pool is
    /// smaller than the one planned with), or for STEPS steps (blocks held a while
    /// by something outside the planner); recorded as a `shrink_pool` fault.
    #[arg(long, value_parser = kvsim_sim::dynamo::parse_shrink)]
    pub shrink_pool: Option<(u64, u32, u32, Option<u64>)>,
    /// STEP:AFTER — single rank: from STEP the (AFTER+1)-th shadow registration
    /// fails, its last group's tail draw raising as a short pool does (recorded as
    /// a `stage_failure` fault; the planner's abort path is then judged by what it left).
    #[arg(long, value_parser = parse_pair)]
    pub fail_registration: Option<(u64, u64)>,
    /// Run the installed planner with this seed-bug patch applied to a copy
    /// (`conformance/dynamo/mutants/`, `kvsim check --planner dynamo --mutant all`).
    #[arg(long, conflicts_with = "planner_source")]
    pub mutant: Option<String>,
}

fn parse_pair(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("{s:?}: expected A:B with two whole numbers");
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    Ok((
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    ))
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Where to write the recorded plan (`kvsim-plan/1`).
    #[arg(long)]
    pub plan_out: PathBuf,
    /// Where to write the planner's own artifact (schema_version 2, normalised).
    #[arg(long)]
    pub artifact_out: Option<PathBuf>,
    /// Where to write the report (`kvsim-dynamo-report/1` plus the replay outcome).
    #[arg(long)]
    pub report_out: Option<PathBuf>,
}

pub fn run(cmd: DynamoCommand) -> Result<ExitCode, CliError> {
    match cmd {
        DynamoCommand::Run(a) => run_cmd(a),
        DynamoCommand::Diff(a) => diff_cmd(a),
    }
}

/// Record the real planner over the scenario the flags name.
pub fn record_scenario(a: &ScenarioArgs) -> Result<(kvsim_core::fpm::scenarios::BuiltinScenario, Recording), CliError> {
    let mut s = super::scenario_arg::load_scenario(a.scenario.as_deref(), a.scenario_file.as_ref())?;
    if let Some(t) = a.timeout_seconds {
        if t == 0 {
            return Err(CliError::Input("--timeout-seconds must be >= 1".into()));
        }
        s.bench.timeout_seconds = t;
    }
    if !(a.clock_scale.is_finite() && a.clock_scale > 0.0) {
        return Err(CliError::Input(format!(
            "--clock-scale must be > 0 (got {})",
            a.clock_scale
        )));
    }
    validate_scenario(&s).map_err(|e| CliError::Input(format!("scenario {}: {e}", s.name)))?;
    if let Some((_, 0)) = a.delay_outputs {
        return Err(CliError::Input("--delay-outputs STEP:BY needs BY >= 1".into()));
    }
    if a.delay_outputs.is_some() && !s.scenario.scheduler.async_scheduling {
        return Err(CliError::Input(
            "--delay-outputs needs a scenario with async_scheduling (outputs in flight)".into(),
        ));
    }
    let message_lag = match a.message_lag {
        None => None,
        Some((rank, steps)) if rank < u64::from(s.scenario.dp_ranks) && s.scenario.dp_ranks > 1 => {
            Some((rank as u32, steps))
        }
        Some((rank, _)) => {
            return Err(CliError::Input(format!(
                "--message-lag {rank}:STEPS needs an attention-DP scenario with rank {rank} (it has {} ranks)",
                s.scenario.dp_ranks
            )))
        }
    };
    // A mutant runs from a patched copy that lives as long as the recording.
    let scratch = match &a.mutant {
        Some(_) => Some(temp_dir().map_err(|e| CliError::Input(e.to_string()))?),
        None => None,
    };
    let planner_source = match (&a.mutant, &scratch) {
        (Some(name), Some(dir)) => {
            let mut ms = select(name).map_err(CliError::Input)?;
            if ms.len() != 1 {
                return Err(CliError::Input(format!("--mutant takes one mutant here, not {name:?}")));
            }
            let m = ms.remove(0);
            Some(patched_copy(&m, &dir.0).map_err(CliError::Input)?)
        }
        _ => a.planner_source.clone(),
    };
    let opts = RecordOptions {
        warmup: !a.no_warmup,
        live_state: a.live_state,
        planner_source,
        max_steps: a.max_steps,
        clock_scale: a.clock_scale,
        timeout: Duration::from_secs(a.harness_timeout),
        delay_outputs: a.delay_outputs,
        message_lag,
        defer_block_free: a.defer_block_free,
        abort_chains: a.abort_chains,
        shrink_pool: a.shrink_pool.map(|(step, rank, blocks, _)| (step, rank, blocks)),
        shrink_steps: a.shrink_pool.and_then(|s| s.3),
        fail_registration: a
            .fail_registration
            .map(|(step, after)| u32::try_from(after).map(|after| (step, after)))
            .transpose()
            .map_err(|_| CliError::Input("--fail-registration: AFTER is too large".into()))?,
    };
    eprintln!(
        "kvsim dynamo: running the real planner over {} (importing vLLM takes ~10 s)",
        s.name
    );
    let rec = record(&s, &opts).map_err(|e| match e {
        RecordError::InvalidPlan(_) => CliError::Failed(e.to_string()),
        e => CliError::Input(e.to_string()),
    })?;
    eprintln!(
        "kvsim dynamo: harness setup {:.1} s, sweep {:.2} s",
        rec.setup_seconds, rec.run_seconds
    );
    Ok((s, rec))
}

fn write(path: &std::path::Path, bytes: &[u8]) -> Result<(), CliError> {
    write_atomic(path, bytes).map_err(|e| CliError::Input(format!("cannot write {}: {e}", path.display())))
}

/// The replay's outcome as report fields.
pub fn outcome_json(report: &RunReport) -> serde_json::Value {
    match &report.outcome {
        Outcome::Passed => serde_json::json!({"outcome": "passed", "steps": report.steps, "ops": report.ops}),
        Outcome::Violation(f) | Outcome::Mismatch(f) => serde_json::json!({
            "outcome": if matches!(report.outcome, Outcome::Violation(_)) { "violation" } else { "mismatch" },
            "invariant": f.invariant.as_deref().unwrap_or("PLAN-MISMATCH"),
            "step": f.step,
            "op": f.op_index,
            "detail": f.detail,
        }),
    }
}

fn run_cmd(a: RunArgs) -> Result<ExitCode, CliError> {
    let (s, rec) = record_scenario(&a.scenario)?;
    let replay = run_plan(&rec.plan);
    write(&a.plan_out, rec.plan_text.as_bytes())?;
    match (&a.artifact_out, &rec.artifact) {
        (Some(p), Some(text)) => write(p, text.as_bytes())?,
        // A sweep stopped before the planner wrote its artifact: say so, keep the rest.
        (Some(p), None) => eprintln!(
            "kvsim dynamo: the planner wrote no artifact; {} not written",
            p.display()
        ),
        _ => {}
    }
    let mut report = rec.report.clone();
    report["replay"] = outcome_json(&replay);
    // A replay that holds leaves the planner's own artifact to the audit.
    let audit = if replay.passed() { audit_error(&rec) } else { None };
    if let Some((id, detail)) = &audit {
        report["artifact_audit"] = serde_json::json!({"check": id, "detail": detail});
    }
    if let Some(p) = &a.report_out {
        let mut text = serde_json::to_string_pretty(&report).expect("reports serialize");
        text.push('\n');
        write(p, text.as_bytes())?;
    }
    print_summary(&s.name, &rec, &replay)?;
    if let Some((id, detail)) = &audit {
        say(format_args!("  FINDING {id} (artifact audit, `kvsim audit`): {detail}"))?;
    }
    Ok(if replay.passed() && audit.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_summary(name: &str, rec: &Recording, replay: &RunReport) -> Result<(), CliError> {
    let r = &rec.report;
    let src = rec.plan.source.as_ref();
    say(format_args!(
        "dynamo {} over vLLM {} ({} module, sha256 {}): scenario {name}",
        src.map_or("?", |s| &s.version),
        src.map_or("?", |s| &s.vllm),
        if src.is_some_and(|s| s.installed) {
            "installed"
        } else {
            "working-copy"
        },
        src.map_or("?", |s| &s.source_sha256[..12.min(s.source_sha256.len())]),
    ))?;
    let kinds = src.map(|s| &s.points[..]).unwrap_or(&[]);
    let shadow = kinds.iter().filter(|p| p.kind == "shadow").count();
    say(format_args!(
        "  recorded: {} steps, {} points ({shadow} borrowed from chains, {} synthetic); planner {}; artifact {}",
        rec.plan.steps.len(),
        kinds.len(),
        kinds.len() - shadow,
        match r["status"].as_str().unwrap_or("?") {
            "fault" => "aborted on the injected fault",
            s => s,
        },
        r["artifact_status"].as_str().unwrap_or("none"),
    ))?;
    if let Some(e) = r["error"].as_str() {
        say(format_args!("  planner error: {e}"))?;
    }
    match &replay.outcome {
        Outcome::Passed => say(format_args!(
            "  replay: passed: {} steps, {} ops, every recorded table reproduced, all invariants held",
            replay.steps, replay.ops
        )),
        Outcome::Violation(f) => say(format_args!(
            "  FINDING {} at {}: {}",
            f.invariant.as_deref().unwrap_or("?"),
            f.location(),
            f.detail
        )),
        Outcome::Mismatch(f) => say(format_args!(
            "  MISMATCH at {}: kvsim does not reproduce the real planner: {}",
            f.location(),
            f.detail
        )),
    }
}

/// The strategy 1.6.1 itself would take: chains where its gate passes, else
/// synthetic KV (1.6.1 has no native exact-context warm-up).
fn port_strategy(s: &kvsim_core::fpm::scenarios::BuiltinScenario, warmup: bool) -> Strategy {
    if warmup && gate(s).chain {
        Strategy::Chain
    } else {
        Strategy::Synthetic
    }
}

fn diff_cmd(a: DiffArgs) -> Result<ExitCode, CliError> {
    let (s, rec) = record_scenario(&a.scenario)?;
    let strategy = port_strategy(&s, !a.scenario.no_warmup);
    let port = run_sweep_with(&s, Some(strategy), &SweepOptions::default(), &mut |_, _| {})
        .map_err(|e| CliError::Input(format!("kvsim's port cannot plan {}: {e}", s.name)))?;
    let kvsim_art = port
        .artifacts
        .first()
        .map(|x| serde_json::to_value(x).expect("artifacts serialize"))
        .unwrap_or_default();
    let real_art: serde_json::Value = rec
        .artifact
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default();
    let sections = compare(&Facts::of(&kvsim_art, &port.plan), &Facts::of(&real_art, &rec.plan));
    say(format_args!(
        "kvsim's port ({}) vs dynamo 1.6.1 (planner {}) on {}",
        strategy_name(strategy),
        rec.report["status"].as_str().unwrap_or("?"),
        s.name
    ))?;
    let mut differs = 0;
    for sec in &sections {
        match &sec.divergence {
            None => say(format_args!("  {:<26} same ({} / {})", sec.name, sec.kvsim, sec.dynamo))?,
            Some(d) => {
                differs += 1;
                say(format_args!(
                    "  {:<26} DIFFERS ({} / {}) {d}",
                    sec.name, sec.kvsim, sec.dynamo
                ))?
            }
        }
    }
    say(format_args!(
        "  {differs} of {} facts differ; spec/dynamo.md §6 lists the known version differences",
        sections.len()
    ))?;
    if let Some(p) = &a.json_out {
        let j = serde_json::json!({
            "format": "kvsim-dynamo-diff/1",
            "scenario": s.name,
            "port_strategy": strategy_name(strategy),
            "sections": sections.iter().map(|x| serde_json::json!({
                "name": x.name, "kvsim": x.kvsim, "dynamo": x.dynamo, "divergence": x.divergence,
            })).collect::<Vec<_>>(),
        });
        let mut text = serde_json::to_string_pretty(&j).expect("serializes");
        text.push('\n');
        write(p, text.as_bytes())?;
    }
    Ok(if differs == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn strategy_name(s: Strategy) -> &'static str {
    match s {
        Strategy::Chain => "chain",
        Strategy::Native => "native",
        Strategy::Synthetic => "synthetic",
    }
}
