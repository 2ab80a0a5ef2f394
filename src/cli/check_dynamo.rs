//! `kvsim check --planner dynamo`: the swarm over the shipped planner
//! (ai-dynamo 1.6.1 on vLLM 0.31.0, run by the harness on persistent workers);
//! with `--mutant`, the hunt for the seed bugs re-introduced as patches.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::json;

use super::check_cmd::{parse_shard, CheckArgs};
use super::{say, CliError};
use kvsim_sim::check::goals::GOALS;
use kvsim_sim::dynamo::check::case::bases;
use kvsim_sim::dynamo::check::hunt::{hunt_real, Control, MutantRow};
use kvsim_sim::dynamo::check::pool::Pool;
use kvsim_sim::dynamo::check::run::CaseEnv;
use kvsim_sim::dynamo::check::swarm::{check_real, RealCheckConfig, RealCheckReport, GOALS_NOT_APPLICABLE};
use kvsim_sim::dynamo::mutants::select;
use kvsim_sim::dynamo::RecordError;

/// Cases per base layout of a default run (six layouts: 240 cases).
const DEFAULT_CASES: u64 = 40;
/// Cases per base layout a mutant hunt may draw.
const DEFAULT_HUNT_CASES: u64 = 20;

fn config(a: &CheckArgs, default_cases: u64) -> Result<RealCheckConfig, CliError> {
    let all = bases();
    let chosen = if a.scenario.is_empty() {
        all
    } else {
        a.scenario
            .iter()
            .map(|n| {
                all.iter().find(|s| &s.name == n).cloned().ok_or_else(|| {
                    CliError::Input(format!(
                        "unknown base {n:?} for --planner dynamo (one of: {})",
                        all.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
                    ))
                })
            })
            .collect::<Result<_, _>>()?
    };
    let cases = a.cases.unwrap_or(default_cases);
    if cases == 0 {
        return Err(CliError::Input("--cases must be at least 1".into()));
    }
    super::check_cmd::case_in_run(a.case, cases, chosen.len())?;
    if a.harness_timeout == 0 {
        return Err(CliError::Input("--harness-timeout must be at least 1".into()));
    }
    let jobs = match a.jobs {
        Some(0) => return Err(CliError::Input("--jobs must be at least 1".into())),
        Some(j) => j,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let planner_source = match &a.planner_source {
        Some(p) => Some(
            std::fs::canonicalize(p)
                .map_err(|_| CliError::Input(format!("the planner source {} does not exist", p.display())))?,
        ),
        None => None,
    };
    Ok(RealCheckConfig {
        seed: a.seed,
        cases,
        shard: parse_shard(&a.shard)?,
        bases: chosen,
        only: a.case,
        jobs,
        planner_flag: planner_source
            .as_ref()
            .map(|p| format!("--planner-source {}", p.display())),
        env: CaseEnv {
            probe_source: planner_source.clone(),
            planner_source,
            wall: Duration::from_secs(a.harness_timeout),
        },
        plans_dir: a.plans_dir.clone(),
    })
}

fn fatal(e: RecordError) -> CliError {
    CliError::Input(e.to_string())
}

pub fn run(a: &CheckArgs) -> Result<ExitCode, CliError> {
    match a.mutant.as_deref() {
        None => run_swarm(a),
        Some(name) => run_hunt(a, name),
    }
}

fn run_swarm(a: &CheckArgs) -> Result<ExitCode, CliError> {
    let cfg = config(a, DEFAULT_CASES)?;
    let tty = std::io::stderr().is_terminal();
    let started = Instant::now();
    eprintln!(
        "check --planner dynamo: {} cases on {} worker(s) (each worker imports vLLM once, ~10 s)",
        cfg.indices().len(),
        cfg.jobs
    );
    let progress = |done: usize, total: usize| {
        if tty || done.is_multiple_of(25) || done == total {
            let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9);
            eprint!(
                "{}check --planner dynamo: {done}/{total} cases ({rate:.1}/s)",
                if tty { "\r" } else { "" }
            );
            if !tty || done == total {
                eprintln!();
            }
        }
    };
    let report = check_real(&cfg, &progress).map_err(fatal)?;
    let seconds = started.elapsed().as_secs_f64();
    if a.json {
        say(serde_json::to_string_pretty(&report).expect("reports serialize"))?;
    } else {
        print_swarm(&report, seconds)?;
    }
    if report.findings.is_empty() && report.missed_goals.is_empty() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError::Failed(format!(
            "{} finding(s) in {} failing case(s), {} goal(s) missed",
            report.findings.len(),
            report.failed_cases(),
            report.missed_goals.len()
        )))
    }
}

fn print_swarm(r: &RealCheckReport, seconds: f64) -> Result<(), CliError> {
    let p = &r.planner;
    say(format_args!(
        "kvsim check --planner dynamo: ai-dynamo {} over vLLM {} ({} module, sha256 {}); seed {}, {} cases per base, shard {}",
        p["version"].as_str().unwrap_or("?"),
        p["vllm"].as_str().unwrap_or("?"),
        if p["installed"] == json!(true) { "installed" } else { "working-copy" },
        p["source_sha256"].as_str().map_or("?", |s| &s[..12.min(s.len())]),
        r.seed,
        r.cases_per_base,
        r.shard
    ))?;
    say(format_args!(
        "{:<16} {:>5} {:>4} {:>6} {:>6} {:>8} {:>9}",
        "base", "cases", "n/a", "passed", "failed", "steps", "ops"
    ))?;
    for b in &r.bases {
        say(format_args!(
            "{:<16} {:>5} {:>4} {:>6} {:>6} {:>8} {:>9}",
            b.base, b.cases, b.not_applicable, b.passed, b.failed, b.steps, b.ops
        ))?;
    }
    if !r.not_applicable.is_empty() {
        say("not applicable (vLLM or the harness refused the draw):")?;
        for (why, n) in &r.not_applicable {
            say(format_args!("  {n:>5}  {why}"))?;
        }
    }
    say("coverage goals:")?;
    for (g, what) in GOALS {
        let n = r.goals.get(*g).copied().unwrap_or(0);
        let na = GOALS_NOT_APPLICABLE.iter().find(|(x, _)| x == g);
        say(format_args!(
            "  {:<22} {:>7}  {what}{}",
            g,
            n,
            match na {
                Some((_, why)) => format!("  (not applicable: {why})"),
                None if n == 0 => "  MISSED".into(),
                None => String::new(),
            }
        ))?;
    }
    for f in &r.findings {
        say(format_args!(
            "FINDING {} in {} case(s), first case {} ({}): {}",
            f.key,
            f.cases,
            f.first_case,
            f.base,
            first_line(f.verdict.detail())
        ))?;
        if let Some(m) = &f.minimal {
            say(format_args!(
                "  shrunk in {} recordings to {}; reproduce: {}",
                m.tries, m.scenario_file, m.command
            ))?;
        }
    }
    let rate = r.cases_run as f64 / seconds.max(1e-9);
    say(format_args!(
        "result: {} ({} cases in {seconds:.1} s, {rate:.2} cases/s; {} failing case(s), {} distinct finding(s); {} of {} applicable goals reached)",
        if r.findings.is_empty() && r.missed_goals.is_empty() { "PASSED" } else { "FAILED" },
        r.cases_run,
        r.failed_cases(),
        r.findings.len(),
        GOALS.len() - GOALS_NOT_APPLICABLE.len() - r.missed_goals.len(),
        GOALS.len() - GOALS_NOT_APPLICABLE.len()
    ))
}

fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or("");
    if l.chars().count() > 160 {
        format!("{}…", l.chars().take(160).collect::<String>())
    } else {
        l.to_string()
    }
}

fn run_hunt(a: &CheckArgs, name: &str) -> Result<ExitCode, CliError> {
    if a.planner_source.is_some() {
        return Err(CliError::Input(
            "--mutant patches the installed planner; it does not take --planner-source".into(),
        ));
    }
    let mutants = select(name).map_err(CliError::Input)?;
    let cfg = config(a, DEFAULT_HUNT_CASES)?;
    let scratch = kvsim_sim::dynamo::temp_dir().map_err(fatal)?;
    let mut control = Control::new();
    let mut pool = Pool::new(cfg.jobs);
    let mut rows: Vec<MutantRow> = Vec::new();
    let tty = std::io::stderr().is_terminal();
    for (k, m) in mutants.iter().enumerate() {
        let row = hunt_real(&cfg, m, &mut control, &mut pool, &scratch.0).map_err(fatal)?;
        if !a.json || tty {
            eprintln!(
                "[{}/{}] {} (bug {}) {} in {:.1} s",
                k + 1,
                mutants.len(),
                row.mutant,
                row.bug,
                if row.killed { "killed" } else { "SURVIVED" },
                row.seconds
            );
        }
        rows.push(row);
    }
    let killed = rows.iter().filter(|r| r.killed).count();
    if a.json {
        let out = json!({
            "format": "kvsim-check-dynamo-mutants/1",
            "seed": cfg.seed,
            "cases_per_base": cfg.cases,
            "shard": a.shard,
            "mutants": rows,
            "killed": killed,
            "killed_by_swarm": rows.iter().filter(|r| r.found_by == Some("swarm")).count(),
            "survived": rows.len() - killed,
        });
        say(serde_json::to_string_pretty(&out).expect("json"))?;
    } else {
        say(format_args!(
            "{:<34} {:>3}  {:<8} {:<28} {:>5} {:>7}  minimal scenario / replay",
            "mutant", "bug", "status", "invariant or exception", "cases", "seconds"
        ))?;
        for r in &rows {
            say(format_args!(
                "{:<34} {:>3}  {:<8} {:<28} {:>5} {:>7.1}  {}",
                r.mutant,
                r.bug,
                match r.found_by {
                    Some("witness") => "witness",
                    _ if r.killed => "killed",
                    _ => "SURVIVED",
                },
                r.verdict.as_deref().unwrap_or("-"),
                r.cases,
                r.seconds,
                r.minimal.as_ref().map_or("-".to_string(), |m| m.scenario_file.clone())
            ))?;
            if let Some(m) = &r.minimal {
                say(format_args!("    {}", m.command))?;
            }
        }
        let secs: f64 = rows.iter().map(|r| r.seconds).sum();
        let by_swarm = rows.iter().filter(|r| r.found_by == Some("swarm")).count();
        say(format_args!(
            "result: {killed} of {} real-planner mutants killed in {secs:.1} s ({by_swarm} by the swarm, shrunk; {} by their witness scenario after the swarm's budget ran out; bugs not patched, and why: conformance/dynamo/mutants/README.md)",
            rows.len(),
            killed - by_swarm
        ))?;
    }
    if killed == rows.len() {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError::Failed(format!("{} mutant(s) survived", rows.len() - killed)))
    }
}
