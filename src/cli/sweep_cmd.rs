//! `kvsim sweep`: run a built-in scenario's whole benchmark sweep on the simulator;
//! `kvsim scenarios`: list the built-in scenarios.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use kvsim_core::fpm::gate::gate;
use kvsim_core::fpm::planner;
use kvsim_core::fpm::scenario_file::scenario_file_json;
use kvsim_core::fpm::scenarios::{builtin_scenarios, validate_scenario};

use super::{say, CliError};
use kvsim_core::fpm::sweep::SweepOptions;
use kvsim_core::plan::GroupKindName;
use kvsim_sim::exec::{Outcome, RunOptions};
use kvsim_sim::output::write_atomic;
use kvsim_sim::sweep::{rank_path, run_sweep_checked};

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// A built-in scenario name (`kvsim scenarios`).
    #[arg(long, required_unless_present = "scenario_file")]
    pub scenario: Option<String>,
    /// A scenario file: `{"name", "description", "scenario": <plan scenario>, "bench": {...}}`.
    #[arg(long, conflicts_with = "scenario")]
    pub scenario_file: Option<PathBuf>,
    /// auto | synthetic | native | chain
    #[arg(long, default_value = "auto")]
    pub strategy: String,
    /// The rank-0 artifact; rank r > 0 goes to `<stem>_dp<r>.<ext>`.
    #[arg(long)]
    pub out: PathBuf,
    /// Also write the plan the sweep ran (replayable with `kvsim replay`).
    #[arg(long)]
    pub plan_out: Option<PathBuf>,
    /// Override the soft timeout (simulated seconds, fractions allowed):
    /// no point or warm-up stage starts after it; the artifact is then partial.
    #[arg(long)]
    pub timeout_seconds: Option<f64>,
    /// Turn random KDA on (Dynamo's `randomize_kda_state`): shadows get private,
    /// deterministic random recurrent state; the scenario needs a Mamba/KDA group.
    #[arg(long)]
    pub random_kda: bool,
    /// Scan the whole KV model after every op instead of what the op changed (slower; the
    /// verdict is the same: tests/tests/incremental_model.rs).
    #[arg(long)]
    pub paranoid: bool,
    /// Plan with a planner's mutant switched on (`kvsim mutants`: a seed bug or slip that
    /// lives in a planner), e.g. to replay the failing plan on a GPU `--against` the clean one.
    /// The plan is written even though its run fails.
    #[arg(long)]
    pub mutant: Option<String>,
}

fn write(path: &std::path::Path, bytes: &[u8]) -> Result<(), CliError> {
    write_atomic(path, bytes).map_err(|e| CliError::Input(format!("cannot write {}: {e}", path.display())))
}

pub fn run(a: SweepArgs) -> Result<ExitCode, CliError> {
    let started = Instant::now();
    let s = super::scenario_arg::load_scenario(a.scenario.as_deref(), a.scenario_file.as_ref())?;
    let mut s = s;
    if a.random_kda {
        let state = s.scenario.model.groups.iter().any(|g| g.kind == GroupKindName::Mamba);
        if !state {
            return Err(CliError::Input(format!(
                "--random-kda needs a Mamba/KDA state group; scenario {} has none",
                s.name
            )));
        }
        s.bench.random_kda = true;
    }
    validate_scenario(&s).map_err(|e| CliError::Input(format!("scenario {}: {e}", s.name)))?;
    let planner = planner::by_name(&a.strategy).ok_or_else(|| {
        let names: Vec<&str> = planner::PLANNERS.iter().map(|p| p.name()).collect();
        let (last, rest) = names.split_last().expect("kvsim has planners");
        CliError::Input(format!(
            "unknown strategy {:?}; use auto, {} or {last}",
            a.strategy,
            rest.join(", ")
        ))
    })?;
    let strategy = planner.map(|p| p.strategy());
    if let Some(t) = a.timeout_seconds {
        if !(t.is_finite() && t > 0.0) {
            return Err(CliError::Input(format!("--timeout-seconds must be > 0 (got {t})")));
        }
    }
    let mutant = match &a.mutant {
        Some(m) => {
            let m: kvsim_core::bugs::Mutant = m.parse().map_err(CliError::Input)?;
            if m.in_engine() {
                return Err(CliError::Input(format!(
                    "{m} lives in the engine, not in a planner: the plan does not carry it (replay the clean plan with --mutant {m})"
                )));
            }
            Some(m)
        }
        None => None,
    };
    let opts = SweepOptions {
        timeout_seconds: a.timeout_seconds,
        mutant,
        ..SweepOptions::default()
    };
    let checks = RunOptions {
        paranoid: a.paranoid,
        ..RunOptions::default()
    };
    let mut bar = super::progress::Progress::new("sweep", "ops");
    let run = run_sweep_checked(&s, strategy, &opts, checks, &mut |done, total| bar.update(done, total))
        .map_err(|e| CliError::Input(e.to_string()))?;
    bar.finish();
    if let Some(p) = &a.plan_out {
        let mut text = serde_json::to_string_pretty(&run.plan).expect("plans serialize");
        text.push('\n');
        write(p, text.as_bytes())?;
    }
    if let Outcome::Violation(f) | Outcome::Mismatch(f) = &run.report.outcome {
        let what = f.invariant.as_deref().unwrap_or("PLAN-MISMATCH");
        return Err(CliError::Failed(format!(
            "sweep stopped: {what} at step {} rank {}: {}",
            f.step, f.rank, f.detail
        )));
    }
    for (rank, art) in run.artifacts.iter().enumerate() {
        let mut text = serde_json::to_string_pretty(art).expect("artifacts serialize");
        text.push('\n');
        write(&rank_path(&a.out, rank as u32), text.as_bytes())?;
    }
    let mut regimes = std::collections::BTreeMap::<String, usize>::new();
    for e in run.meta.executions.iter().filter(|e| e.rank == 0) {
        *regimes.entry(e.kv_seed_regime.clone()).or_default() += 1;
    }
    let regimes: Vec<String> = regimes.iter().map(|(k, v)| format!("{k}={v}")).collect();
    say(format_args!(
        "scenario {} ({}), strategy {}",
        s.name,
        s.scenario.name,
        run.meta.initialization_strategy.as_deref().unwrap_or("synthetic")
    ))?;
    say(format_args!(
        "  decode executions (rank 0, eager replicas included): {}",
        regimes.join(" ")
    ))?;
    say(format_args!(
        "  capacity fallbacks: {}   gate: {}",
        run.meta.capacity_fallbacks.len(),
        gate(&s)
            .skip_reason
            .map_or("eligible".to_string(), |r| format!("skip:{r}"))
    ))?;
    let kv_sum: u64 = run
        .meta
        .executions
        .iter()
        .filter(|e| {
            e.rank == 0 && (e.kv_seed_regime == "real_kv" || e.kv_seed_regime == "real_attention_kv_random_kda")
        })
        .map(|e| e.point.total_kv_read_tokens)
        .sum();
    say(format_args!(
        "  untimed warm-up prefill tokens: {} (Σ total_kv_read_tokens over the real-KV executions: {kv_sum})",
        run.meta.untimed_prefill_tokens
    ))?;
    if let Some(art) = run.artifacts.first() {
        if let Some(reason) = &art.stop_reason {
            say(format_args!(
                "  status {} (stop_reason {reason}): {} of {} points measured",
                art.status, art.coverage["completed_points"], art.coverage["expected_points"]
            ))?;
        }
    }
    say(format_args!(
        "  {} steps, {} ops, all invariants held; simulated {:.3} s; wall {:.2} s",
        run.report.steps,
        run.report.ops,
        run.report.sim_time_ns as f64 / 1e9,
        started.elapsed().as_secs_f64()
    ))?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct ScenariosArgs {
    /// Print this built-in scenario as a scenario file (what `--scenario-file` reads), to copy
    /// and edit into your own model.
    #[arg(long, value_name = "NAME")]
    pub show: Option<String>,
}

pub fn run_scenarios(a: ScenariosArgs) -> Result<ExitCode, CliError> {
    if let Some(name) = &a.show {
        let s = super::scenario_arg::load_scenario(Some(name), None)?;
        say(scenario_file_json(&s).trim_end())?;
        return Ok(ExitCode::SUCCESS);
    }
    for s in builtin_scenarios() {
        let v = gate(&s);
        let native = if v.native { "native" } else { "-" };
        let (name, description) = (&s.name, &s.description);
        let chain = if v.chain { "chain" } else { "-" };
        say(format_args!(
            "{:<16} dp={} pool={:<7} strategies: synthetic {native} {chain}   {}",
            name, s.scenario.dp_ranks, s.scenario.pool_blocks, description
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
