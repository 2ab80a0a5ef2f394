//! `kvsim check`: the main job. Swarm property suites over every built-in
//! scenario (coverage goals included); with `--mutant`, the hunt for seed-bug
//! and model mutants, each kill shrunk to a minimal plan that `kvsim replay`
//! reproduces.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;

use kvsim_core::bugs::Mutant;
use kvsim_core::fpm::scenario_file::load_scenario_file;
use kvsim_core::fpm::scenarios::{builtin_scenarios, find_scenario, BuiltinScenario};

use super::progress::Progress;
use super::{say, CliError};
use kvsim_sim::check::goals::GOALS;
use kvsim_sim::check::merge::merge;
use kvsim_sim::check::run::Verdict;
use kvsim_sim::check::suite::{check_with, fixed_pair, hunt_all, CheckConfig, CheckReport, MutantRow};
use kvsim_sim::output::write_atomic;

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(subcommand)]
    pub action: Option<CheckAction>,
    /// A mutant to hunt (`kvsim mutants` lists them), or `all`; with --planner
    /// dynamo also a comma-separated list of real-planner mutants.
    #[arg(long)]
    pub mutant: Option<String>,
    /// Cases per scenario (default 100; with --mutant, the budget per mutant, also 100).
    #[arg(long)]
    pub cases: Option<u64>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// K/N: run only case indices i with i mod N = K − 1 (shards of one run are disjoint
    /// and together make the whole run).
    #[arg(long, default_value = "1/1")]
    pub shard: String,
    /// Only these built-in scenarios (repeatable).
    #[arg(long)]
    pub scenario: Vec<String>,
    /// Swarm this scenario file too (repeatable; `kvsim scenarios --show NAME` prints a
    /// built-in as a template). Without --scenario, only the files are swarmed.
    #[arg(long)]
    pub scenario_file: Vec<PathBuf>,
    /// Where failing and shrunk plans are written.
    #[arg(long, default_value = "kvsim-check-plans")]
    pub plans_dir: PathBuf,
    /// With --mutant: also write each killed planner mutant's whole failing plan
    /// (NAME.failing.json) and the same case planned without it (NAME.fixed.json), for
    /// `kvsim replay NAME.failing.json --backend gpu --against NAME.fixed.json`.
    #[arg(long)]
    pub pairs: bool,
    /// Run only case index I of the run (as a report names it).
    #[arg(long)]
    pub case: Option<u64>,
    /// Print the report as JSON (byte-identical for the same flags; no timings).
    #[arg(long)]
    pub json: bool,
    /// Whose plans to check: kvsim's own planners (default), or `dynamo`, the shipped
    /// ai-dynamo 1.6.1 planner run by the harness (its environment must be installed).
    #[arg(long, default_value = "kvsim", value_parser = ["kvsim", "dynamo"])]
    pub planner: String,
    /// Threads (default: the machine's cores); with --planner dynamo, harness workers run
    /// at once. The report is the same for any number.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// With --planner dynamo: swarm this working copy of `instrumented_scheduler.py`.
    #[arg(long)]
    pub planner_source: Option<PathBuf>,
    /// With --planner dynamo: wall-clock seconds one case may take before it is killed
    /// and reported as hung.
    #[arg(long, default_value_t = 120)]
    pub harness_timeout: u64,
}

#[derive(Subcommand, Debug)]
pub enum CheckAction {
    /// Sum the `--json` reports of the shards of one run into the unsharded run's report
    /// (the same JSON bytes), judging the coverage goals over their union.
    Merge(MergeArgs),
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The shards' `kvsim check --shard K/N --json` reports, each shard once.
    #[arg(required = true)]
    pub reports: Vec<PathBuf>,
    /// Print the merged report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Where the shards wrote their failing plans (named in the replay commands).
    #[arg(long, default_value = "kvsim-check-plans")]
    pub plans_dir: PathBuf,
}

/// `--jobs`, or every core.
pub fn jobs(a: Option<usize>) -> Result<usize, CliError> {
    match a {
        Some(0) => Err(CliError::Input("--jobs must be at least 1".into())),
        Some(n) => Ok(n),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

pub fn parse_shard(s: &str) -> Result<(u64, u64), CliError> {
    let bad = || CliError::Input(format!("--shard {s:?}: expected K/N with 1 ≤ K ≤ N"));
    let (k, n) = s.split_once('/').ok_or_else(bad)?;
    let (k, n): (u64, u64) = (
        k.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if k == 0 || n == 0 || k > n {
        return Err(bad());
    }
    Ok((k, n))
}

/// The scenarios to swarm: the named built-ins, then the scenario files; every built-in when
/// neither is given. Two scenarios of one name would make one report row of two: refused.
fn scenarios(a: &CheckArgs) -> Result<Vec<BuiltinScenario>, CliError> {
    if a.scenario.is_empty() && a.scenario_file.is_empty() {
        return Ok(builtin_scenarios());
    }
    let mut out: Vec<BuiltinScenario> = a
        .scenario
        .iter()
        .map(|n| {
            find_scenario(n).ok_or_else(|| CliError::Input(format!("unknown scenario {n:?} (see `kvsim scenarios`)")))
        })
        .collect::<Result<_, _>>()?;
    for path in &a.scenario_file {
        let s = load_scenario_file(&super::read_file(path)?)
            .map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?;
        out.push(s);
    }
    let mut names = std::collections::BTreeSet::new();
    if let Some(dup) = out.iter().find(|s| !names.insert(s.name.as_str())) {
        return Err(CliError::Input(format!(
            "two scenarios named {:?}: give each scenario file its own \"name\"",
            dup.name
        )));
    }
    Ok(out)
}

fn config(a: &CheckArgs, default_cases: u64) -> Result<CheckConfig, CliError> {
    let scenarios = scenarios(a)?;
    let cases = a.cases.unwrap_or(default_cases);
    if cases == 0 {
        return Err(CliError::Input("--cases must be at least 1".into()));
    }
    case_in_run(a.case, cases, scenarios.len())?;
    Ok(CheckConfig {
        seed: a.seed,
        cases,
        shard: parse_shard(&a.shard)?,
        scenarios,
        only: a.case,
        jobs: jobs(a.jobs)?,
    })
}

pub fn run(a: CheckArgs) -> Result<ExitCode, CliError> {
    if let Some(CheckAction::Merge(m)) = &a.action {
        return run_merge(m);
    }
    if a.pairs && (a.mutant.is_none() || a.planner == "dynamo") {
        return Err(CliError::Input(
            "--pairs goes with --mutant (kvsim's planner mutants)".into(),
        ));
    }
    if a.planner == "dynamo" {
        if !a.scenario_file.is_empty() {
            return Err(CliError::Input(
                "--scenario-file swarms kvsim's planners; for the real planner use `kvsim dynamo run --scenario-file F`"
                    .into(),
            ));
        }
        return super::check_dynamo::run(&a);
    }
    if a.planner_source.is_some() {
        return Err(CliError::Input(
            "--planner-source applies to --planner dynamo only".into(),
        ));
    }
    let mutants = match a.mutant.as_deref() {
        None => None,
        Some("all") => Some(Mutant::all()),
        Some(name) => Some(vec![name.parse::<Mutant>().map_err(CliError::Input)?]),
    };
    match mutants {
        None => run_suites(&a),
        Some(m) => run_mutants(&a, &m),
    }
}

fn plan_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.json"))
}

fn write_plan(dir: &Path, name: &str, plan: &kvsim_core::plan::Plan) -> Result<PathBuf, CliError> {
    std::fs::create_dir_all(dir).map_err(|e| CliError::Input(format!("cannot create {}: {e}", dir.display())))?;
    let path = plan_file(dir, name);
    let text = serde_json::to_string_pretty(plan).expect("plans serialize") + "\n";
    write_atomic(&path, text.as_bytes())
        .map_err(|e| CliError::Input(format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

fn run_suites(a: &CheckArgs) -> Result<ExitCode, CliError> {
    let cfg = config(a, 100)?;
    // The cases' bar, then the exhaustive pass's (both borrowed by the callbacks).
    let bar = std::cell::RefCell::new(Progress::new("check", "cases"));
    let mut levels: Option<Progress> = None;
    let report = check_with(
        &cfg,
        &mut |done, total| bar.borrow_mut().update(done, total),
        &mut |done, total| {
            bar.borrow_mut().finish();
            levels
                .get_or_insert_with(|| Progress::new("exhaustive", "levels"))
                .update(done, total)
        },
    );
    drop(levels);
    bar.borrow_mut().finish();
    let mut files = Vec::new();
    for f in &report.failures {
        files.push(match &f.plan {
            Some(p) => Some(write_plan(&a.plans_dir, &format!("{}-case{}", f.scenario, f.case), p)?),
            None => None,
        });
    }
    report_suites(&report, &files, a.json)
}

/// Print a report (text or JSON) and judge it: a whole run must reach every goal; a
/// shard or one `--case` passes on its cases (its goals are judged by the merge).
fn report_suites(report: &CheckReport, files: &[Option<PathBuf>], json: bool) -> Result<ExitCode, CliError> {
    if json {
        say(serde_json::to_string_pretty(report).expect("report serializes"))?;
    } else {
        print_suites(report, files)?;
    }
    if report.passed(report.goals_enforced()) {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError::Failed(format!(
            "{} scenario(s) failed, {} goal(s) missed",
            report.failures.len(),
            if report.goals_enforced() {
                report.missed_goals.len()
            } else {
                0
            }
        )))
    }
}

fn read_report(path: &Path) -> Result<CheckReport, CliError> {
    let text = super::read_file(path)?;
    let de = &mut serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        CliError::Input(format!(
            "{}: at {}: {} (expected a `kvsim check --json` report)",
            path.display(),
            kvsim_core::plan::json_path("$", &e.path().to_string()),
            e.inner()
        ))
    })
}

fn run_merge(m: &MergeArgs) -> Result<ExitCode, CliError> {
    let reports = m
        .reports
        .iter()
        .map(|p| read_report(p))
        .collect::<Result<Vec<_>, _>>()?;
    let merged = merge(&reports).map_err(|e| CliError::Input(format!("kvsim check merge: {e}")))?;
    // The shards wrote the plans of the failures they kept, under the same names.
    let files: Vec<Option<PathBuf>> = merged
        .failures
        .iter()
        .map(|f| {
            matches!(f.verdict, Verdict::Violation { .. } | Verdict::Mismatch { .. })
                .then(|| plan_file(&m.plans_dir, &format!("{}-case{}", f.scenario, f.case)))
        })
        .collect();
    report_suites(&merged, &files, m.json)
}

fn print_suites(r: &CheckReport, files: &[Option<PathBuf>]) -> Result<(), CliError> {
    say(format_args!(
        "kvsim check: seed {}, {} cases per scenario, shard {}",
        r.seed, r.cases_per_scenario, r.shard
    ))?;
    say(format_args!(
        "{:<18} {:>5} {:>4} {:>6} {:>6} {:>9}  {:<10} goals reached",
        "scenario", "cases", "n/a", "passed", "failed", "ops", "invariants"
    ))?;
    for s in &r.scenarios {
        say(format_args!(
            "{:<18} {:>5} {:>4} {:>6} {:>6} {:>9}  {:<10} {}",
            s.scenario,
            s.cases,
            s.not_applicable,
            s.passed,
            s.failed,
            s.ops,
            format!("{}/{}", s.invariants_held, s.invariants_total),
            s.goals_reached.join(", ")
        ))?;
    }
    print_na_reasons(r)?;
    if r.goals_enforced() {
        say("coverage goals:")?;
    } else if r.is_whole_run() {
        say("coverage goals (reported, not enforced: they bind a run over every built-in scenario):")?;
    } else {
        say(format_args!(
            "coverage goals (reported, not enforced: {}; `kvsim check merge` judges the whole run):",
            r.case
                .map_or(format!("shard {}", r.shard), |c| format!("case {c} alone"))
        ))?;
    }
    for (g, what) in GOALS {
        let n = r.goals.get(*g).copied().unwrap_or(0);
        say(format_args!(
            "  {:<22} {:>7}  {what}{}",
            g,
            n,
            if n == 0 { "  MISSED" } else { "" }
        ))?;
    }
    for (f, path) in r.failures.iter().zip(files) {
        let detail = serde_json::to_value(&f.verdict).expect("verdicts serialize");
        say(format_args!(
            "FAILED {} case {}: {} — {}",
            f.scenario,
            f.case,
            f.verdict.label(),
            detail["detail"].as_str().unwrap_or_default()
        ))?;
        if let Some(path) = path {
            say(format_args!(
                "  {} ops shrunk to {}; replay: kvsim replay {}",
                f.original_ops,
                f.shrunk_ops,
                path.display()
            ))?;
        }
    }
    match &r.exhaustive {
        Some(x) => {
            say(format_args!(
                "exhaustive (tiny pool, every op sequence up to {} ops): {} states, {} sequences, {}",
                x.depth,
                x.states,
                x.sequences,
                x.violation.as_deref().unwrap_or("no violation")
            ))?;
            let h = &x.hybrid;
            say(format_args!(
                "exhaustive (full attention + two windows, up to {} ops): {} states, {} sequences, {}; hybrid fixed point {}",
                h.depth,
                h.states,
                h.sequences,
                h.violation.as_deref().unwrap_or("no violation"),
                h.fixed_point
                    .as_ref()
                    .map_or("never re-asked".to_string(), |ops| format!("re-asked after {ops}"))
            ))?
        }
        None if r.case.is_some() => say("exhaustive: not run for one case")?,
        None => say(format_args!(
            "exhaustive: run by the last shard ({}/{})",
            r.shard.split('/').nth(1).unwrap_or("N"),
            r.shard.split('/').nth(1).unwrap_or("N")
        ))?,
    }
    let failed: u64 = r.scenarios.iter().map(|s| s.failed).sum();
    let whole = r.goals_enforced();
    say(format_args!(
        "result: {} ({} cases, {} failed, {} of {} goals reached{})",
        if r.passed(whole) { "PASSED" } else { "FAILED" },
        r.cases_run,
        failed,
        GOALS.len() - r.missed_goals.len(),
        GOALS.len(),
        if whole { "" } else { " in this part" }
    ))
}

/// Under the table: why cases did not apply, per scenario and reason.
fn print_na_reasons(r: &CheckReport) -> Result<(), CliError> {
    if r.scenarios.iter().all(|s| s.not_applicable_reasons.is_empty()) {
        return say("n/a reasons: none (every case applied)");
    }
    say("n/a reasons:")?;
    for s in &r.scenarios {
        for (reason, n) in &s.not_applicable_reasons {
            say(format_args!("  {:<18} {:>4}  {reason}", s.scenario, n))?;
        }
    }
    Ok(())
}

fn replay_command(row: &MutantRow, path: &Path) -> String {
    if row.in_engine {
        format!("kvsim replay {} --mutant {}", path.display(), row.mutant)
    } else {
        format!("kvsim replay {}", path.display())
    }
}

fn run_mutants(a: &CheckArgs, mutants: &[Mutant]) -> Result<ExitCode, CliError> {
    let cfg = config(a, 100)?;
    let mut bar = Progress::new("mutants", "mutants");
    let rows = hunt_all(&cfg, mutants, &mut |done, total| bar.update(done, total));
    bar.finish();
    let mut commands = Vec::new();
    for (row, mutant) in rows.iter().zip(mutants) {
        commands.push(match &row.plan {
            Some(plan) => Some(replay_command(row, &write_plan(&a.plans_dir, &row.mutant, plan)?)),
            None => None,
        });
        let pair = a.pairs.then(|| fixed_pair(&cfg, row, *mutant)).flatten();
        if let Some((failing, fixed)) = pair {
            write_plan(&a.plans_dir, &format!("{}.failing", row.mutant), &failing)?;
            write_plan(&a.plans_dir, &format!("{}.fixed", row.mutant), &fixed)?;
        }
    }
    let killed = rows.iter().filter(|r| r.killed && r.replay_reproduces).count();
    if a.json {
        let list: Vec<_> = rows
            .iter()
            .zip(&commands)
            .map(|(r, c)| {
                let mut v = serde_json::to_value(r).expect("rows serialize");
                v["replay"] = json!(c);
                v
            })
            .collect();
        let out = json!({
            "format": "kvsim-check-mutants/1",
            "seed": cfg.seed,
            "cases_per_scenario": cfg.cases,
            "shard": a.shard,
            "mutants": list,
            "killed": killed,
            "survived": rows.len() - killed,
        });
        say(serde_json::to_string_pretty(&out).expect("json"))?;
    } else {
        say(format_args!(
            "{:<30} {:>3}  {:<8} {:<17} {:>5} {:>7} {:>11}  replay",
            "mutant", "bug", "status", "invariant", "cases", "seconds", "shrunk ops"
        ))?;
        for (r, c) in rows.iter().zip(&commands) {
            let status = match (r.killed, r.replay_reproduces) {
                (true, true) => "killed",
                (true, false) => "no-repro",
                _ => "SURVIVED",
            };
            say(format_args!(
                "{:<30} {:>3}  {:<8} {:<17} {:>5} {:>7.2} {:>11}  {}",
                r.mutant,
                r.bug.map_or("-".to_string(), |b| b.to_string()),
                status,
                r.invariant.as_deref().unwrap_or("-"),
                r.cases,
                r.seconds,
                r.shrunk_ops
                    .zip(r.original_ops)
                    .map_or("-".to_string(), |(s, o)| format!("{s} of {o}")),
                c.as_deref().unwrap_or("-")
            ))?;
        }
        let secs: f64 = rows.iter().map(|r| r.seconds).sum();
        say(format_args!(
            "result: {killed} of {} mutants killed in {secs:.1} s",
            rows.len()
        ))?;
    }
    if killed == rows.len() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError::Failed(format!("{} mutant(s) survived", rows.len() - killed)))
    }
}

/// `--case I` names a case of the run: a case of a larger run needs that run's `--cases`.
pub(crate) fn case_in_run(case: Option<u64>, cases: u64, bases: usize) -> Result<(), CliError> {
    let total = cases * bases as u64;
    match case {
        Some(i) if i >= total => Err(CliError::Input(format!(
            "--case {i} is not in this run: {cases} cases per base over {bases} base(s) are cases 0..{}; \
             pass the --cases of the run that reported it",
            total.saturating_sub(1)
        ))),
        _ => Ok(()),
    }
}
