//! `kvsim microbench plans --out-dir DIR`: the kernel microbenchmark suite as plans and a
//! manifest; `kvsim microbench run DIR --out-dir RESULTS`: every plan of a manifest replayed on
//! the GPU with per-op timing, one device command (docs/timing.md, "Kernel microbenchmarks").

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use kvsim_core::fpm::planner;
use kvsim_core::fpm::scenario_file::scenario_file_json;
use kvsim_core::fpm::sweep::{load_plan_checked, SweepOptions};
use kvsim_sim::cost::microbench::{suite, Entry, Replay, MANIFEST_FORMAT};
use kvsim_sim::exec::{plan_hash, Outcome, RunOptions};
use kvsim_sim::output::write_atomic;
use kvsim_sim::sweep::run_sweep_checked;
use serde_json::{json, Value};

use super::{read_file, say, CliError};

#[derive(Subcommand, Debug)]
pub enum MicrobenchCommand {
    /// Sweep every microbenchmark layout into a plan; write the plans, their scenario files
    /// and `manifest.json` (nothing is written unless every plan is made).
    Plans(PlansArgs),
    /// Replay every plan of a manifest on the GPU with per-op timing; one results file per
    /// plan (written as each finishes), then `kvsim calibrate RESULTS/*.gpu.json`.
    Run(RunArgs),
    /// List the suite: name, kernel family, strategy, axes.
    List,
}

#[derive(Args, Debug)]
pub struct PlansArgs {
    /// Where to write the plans and the manifest (created if missing).
    #[arg(long)]
    pub out_dir: PathBuf,
    /// Only these entries (comma-separated names; default: all).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The directory `microbench plans` wrote.
    pub dir: PathBuf,
    /// Where to write `<name>.gpu.json` per plan.
    #[arg(long)]
    pub out_dir: PathBuf,
    /// Untimed runs of each plan first.
    #[arg(long, default_value_t = 1)]
    pub warmup: u32,
    /// Timed runs of each plan (medians).
    #[arg(long, default_value_t = 2)]
    pub repeat: u32,
    /// Only these entries (comma-separated names; default: all in the manifest).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Passes per plan: `ops` (every launching op timed with its own events: each kernel's
    /// cost, `<name>.gpu.json`) and `plain` (steps and windows only: launches queued back to
    /// back as in a benchmark, the launch and host overheads, `<name>.plain.gpu.json`).
    #[arg(long, value_delimiter = ',', default_value = "ops,plain")]
    pub passes: Vec<String>,
}

/// The results file of a pass.
fn pass_file(name: &str, pass: &str) -> String {
    match pass {
        "ops" => format!("{name}.gpu.json"),
        _ => format!("{name}.{pass}.gpu.json"),
    }
}

pub fn run(c: MicrobenchCommand) -> Result<ExitCode, CliError> {
    match c {
        MicrobenchCommand::Plans(a) => plans(a),
        MicrobenchCommand::Run(a) => run_all(a),
        MicrobenchCommand::List => {
            for e in suite() {
                say(format_args!(
                    "{:<18} {:<24} {:<9} {}",
                    e.name, e.family, e.strategy, e.axes
                ))?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The entries `only` names (all when empty); an unknown name is bad input.
fn selected(only: &[String]) -> Result<Vec<Entry>, CliError> {
    let all = suite();
    if let Some(bad) = only.iter().find(|n| !all.iter().any(|e| e.name == n.as_str())) {
        let names: Vec<&str> = all.iter().map(|e| e.name).collect();
        return Err(CliError::Input(format!(
            "--only {bad}: not a microbenchmark (one of: {})",
            names.join(", ")
        )));
    }
    Ok(all
        .into_iter()
        .filter(|e| only.is_empty() || only.iter().any(|n| n == e.name))
        .collect())
}

fn replay_name(r: Replay) -> &'static str {
    match r {
        Replay::Plain => "plain",
        Replay::CollapsedRouting => "collapsed_routing",
    }
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), CliError> {
    write_atomic(path, bytes).map_err(|e| CliError::Input(format!("cannot write {}: {e}", path.display())))
}

fn plans(a: PlansArgs) -> Result<ExitCode, CliError> {
    let entries = selected(&a.only)?;
    // Every plan is made before anything is written: a failing sweep leaves no partial suite.
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    let mut manifest = Vec::new();
    let mut bar = super::progress::Progress::new("microbench plans", "plans");
    for (i, e) in entries.iter().enumerate() {
        bar.update(i as u64, entries.len() as u64);
        let strategy = planner::by_name(e.strategy)
            .expect("the suite names kvsim's planners")
            .map(|p| p.strategy());
        let run = run_sweep_checked(
            &e.scenario,
            strategy,
            &SweepOptions::default(),
            RunOptions::default(),
            &mut |_, _| {},
        )
        .map_err(|err| CliError::Input(format!("microbench {}: {err}", e.name)))?;
        if let Outcome::Violation(f) | Outcome::Mismatch(f) = &run.report.outcome {
            return Err(CliError::Failed(format!(
                "microbench {}: the sweep failed {} at step {}: {}",
                e.name,
                f.invariant.as_deref().unwrap_or("PLAN-MISMATCH"),
                f.step,
                f.detail
            )));
        }
        let plan_file = format!("{}.plan.json", e.name);
        let mut text = serde_json::to_string_pretty(&run.plan).expect("plans serialize");
        text.push('\n');
        files.push((a.out_dir.join(&plan_file), text));
        let scenario_file = format!("{}.scenario.json", e.name);
        files.push((a.out_dir.join(&scenario_file), scenario_file_json(&e.scenario)));
        manifest.push(json!({
            "name": e.name,
            "family": e.family,
            "axes": e.axes,
            "strategy": e.strategy,
            "replay": replay_name(e.replay),
            "plan": plan_file,
            "plan_hash": plan_hash(&run.plan),
            "scenario": scenario_file,
            "steps": run.report.steps,
            "decode_executions": run.meta.executions.len(),
        }));
    }
    bar.finish();
    std::fs::create_dir_all(&a.out_dir)
        .map_err(|e| CliError::Input(format!("cannot create {}: {e}", a.out_dir.display())))?;
    for (path, text) in &files {
        write(path, text.as_bytes())?;
    }
    let mut text =
        serde_json::to_string_pretty(&json!({"format": MANIFEST_FORMAT, "entries": manifest})).expect("serializes");
    text.push('\n');
    write(&a.out_dir.join("manifest.json"), text.as_bytes())?;
    say(format_args!(
        "{} microbenchmark plans in {}; on the GPU: kvsim microbench run {} --out-dir RESULTS",
        manifest.len(),
        a.out_dir.display(),
        a.out_dir.display()
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// One manifest entry: name, plan file, replay mode.
fn manifest_entries(dir: &Path) -> Result<Vec<(String, PathBuf, String)>, CliError> {
    let path = dir.join("manifest.json");
    let m: Value =
        serde_json::from_str(&read_file(&path)?).map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?;
    if m["format"] != MANIFEST_FORMAT {
        return Err(CliError::Input(format!(
            "{}: not a {MANIFEST_FORMAT} manifest",
            path.display()
        )));
    }
    let bad = |what: &str| CliError::Input(format!("{}: an entry without {what}", path.display()));
    m["entries"]
        .as_array()
        .ok_or_else(|| bad("entries"))?
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().map(str::to_string).ok_or_else(|| bad(k));
            Ok((s("name")?, dir.join(s("plan")?), s("replay")?))
        })
        .collect()
}

fn run_all(a: RunArgs) -> Result<ExitCode, CliError> {
    if let Some(bad) = a.passes.iter().find(|p| !matches!(p.as_str(), "ops" | "plain")) {
        return Err(CliError::Input(format!("--passes {bad}: use ops, plain or both")));
    }
    if let Some(reason) = kvsim_gpu::no_device_reason() {
        return Err(CliError::Input(format!("no CUDA device: {reason}")));
    }
    let mut entries = manifest_entries(&a.dir)?;
    if let Some(bad) = a.only.iter().find(|n| !entries.iter().any(|e| &e.0 == *n)) {
        return Err(CliError::Input(format!("--only {bad}: not in {}", a.dir.display())));
    }
    entries.retain(|e| a.only.is_empty() || a.only.contains(&e.0));
    // Plans are read and checked before the first device run.
    let mut plans = Vec::new();
    for (name, path, replay) in &entries {
        let plan =
            load_plan_checked(&read_file(path)?).map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?;
        let mut o = super::replay_gpu::GpuReplayOptions {
            warmup: a.warmup,
            repeat: a.repeat,
            ..Default::default()
        };
        match replay.as_str() {
            "plain" => {}
            "collapsed_routing" => {
                o.lowering.synthetic_kv = kvsim_gpu::SyntheticKv::Zero;
                o.lowering.moe_input = kvsim_gpu::MoeInput::Hidden;
            }
            other => return Err(CliError::Input(format!("{name}: unknown replay mode {other:?}"))),
        }
        plans.push((name.clone(), plan, o));
    }
    std::fs::create_dir_all(&a.out_dir)
        .map_err(|e| CliError::Input(format!("cannot create {}: {e}", a.out_dir.display())))?;
    let mut failed = Vec::new();
    let runs = plans.len() * a.passes.len();
    for (i, (name, plan, o)) in plans.iter().enumerate() {
        for (j, pass) in a.passes.iter().enumerate() {
            eprintln!("[{}/{runs}] {name} ({pass})", i * a.passes.len() + j + 1);
            let o = super::replay_gpu::GpuReplayOptions {
                time_ops: pass == "ops",
                ..o.clone()
            };
            let out = a.out_dir.join(pass_file(name, pass));
            let code = super::replay_gpu::run(plan, &out, &o, None)?;
            if code != ExitCode::SUCCESS {
                failed.push(format!("{name} ({pass})"));
            }
        }
    }
    if failed.is_empty() {
        say(format_args!(
            "{} microbenchmarks measured ({runs} runs); fit with: kvsim calibrate {}/*.gpu.json --out PROFILE",
            plans.len(),
            a.out_dir.display()
        ))?;
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError::Failed(format!(
            "{} of {runs} microbenchmark runs failed verification: {}",
            failed.len(),
            failed.join(", ")
        )))
    }
}
