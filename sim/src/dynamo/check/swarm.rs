//! `kvsim check --planner dynamo`: swarm cases over the real planner (round
//! robin over the base layouts, seeded per index, sharded by index), each
//! recording replayed with every invariant; per-base table, coverage goals,
//! and every distinct finding shrunk to a minimal scenario with the one
//! command that reproduces it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use kvsim_core::fpm::scenarios::BuiltinScenario;
use kvsim_core::plan::Plan;

use super::case::RealCase;
use super::pool::{run_all, Pool};
use super::run::{run_real_case, CaseEnv, RealOutcome, RealVerdict};
use super::shrink::shrink_case;
use crate::check::case_seed;
use crate::check::goals::{self, GOALS};
use crate::dynamo::RecordError;

/// Goals the real harness cannot reach yet, and why.
pub const GOALS_NOT_APPLICABLE: &[(&str, &str)] = &[(
    "ranks-disagree",
    "the real DP ranks derive one negotiated plan and settle every stage by the group verdict: a smaller pool on one rank is negotiated away at step 0, fails a stage on every rank as a build closes, or stalls or times out the group (docs/dynamo-findings.md §10); ranks that decide apart are the DP mutants' kills",
)];

/// A `kvsim check --planner dynamo` run.
#[derive(Clone)]
pub struct RealCheckConfig {
    /// The seed.
    pub seed: u64,
    /// Cases per base layout (before sharding).
    pub cases: u64,
    /// The shard.
    pub shard: (u64, u64),
    /// Base scenarios.
    pub bases: Vec<BuiltinScenario>,
    /// Only this case.
    pub only: Option<u64>,
    /// Harness workers.
    pub jobs: usize,
    /// The harness environment.
    pub env: CaseEnv,
    /// Where minimal scenarios and plans go.
    pub plans_dir: PathBuf,
    /// How the reproducing command names the planner (`--planner-source P` or `--mutant M`).
    pub planner_flag: Option<String>,
}

impl RealCheckConfig {
    /// The case indices of this shard.
    pub fn indices(&self) -> Vec<u64> {
        let n = self.bases.len() as u64;
        let (k, shards) = self.shard;
        (0..self.cases * n)
            .filter(|i| i % shards == k - 1 && self.only.is_none_or(|o| o == *i))
            .collect()
    }

    /// The base scenario of case `index`.
    pub fn base(&self, index: u64) -> &BuiltinScenario {
        &self.bases[(index % self.bases.len() as u64) as usize]
    }

    /// Case `index`.
    pub fn case(&self, index: u64) -> RealCase {
        RealCase::draw(
            self.base(index),
            &mut ChaCha8Rng::seed_from_u64(case_seed(self.seed, index)),
        )
    }
}

/// One base scenario's row.
#[derive(Clone, Debug, Default, Serialize)]
pub struct BaseRow {
    /// The base.
    pub base: String,
    /// Cases.
    pub cases: u64,
    /// Cases that did not apply.
    pub not_applicable: u64,
    /// Cases that passed.
    pub passed: u64,
    /// Cases that failed.
    pub failed: u64,
    /// Ops recorded.
    pub ops: u64,
    /// Steps recorded.
    pub steps: u64,
}

/// A reproduction: a scenario file, its plan and the command.
#[derive(Clone, Debug, Serialize)]
pub struct Repro {
    /// The shrunk knobs (none for a hand-made witness scenario).
    pub knobs: Option<RealCase>,
    /// Its verdict.
    pub verdict: Option<RealVerdict>,
    /// Recordings the shrink made.
    pub tries: usize,
    /// The scenario file.
    pub scenario_file: String,
    /// The plan file.
    pub plan_file: String,
    /// The `kvsim dynamo run` command.
    pub command: String,
}

/// A distinct finding.
#[derive(Clone, Debug, Serialize)]
pub struct RealFinding {
    /// The label, and for a Python exception its type.
    pub key: String,
    /// Cases that failed this way.
    pub cases: u64,
    /// The first case showing it.
    pub first_case: u64,
    /// Its base.
    pub base: String,
    /// Its verdict.
    pub verdict: RealVerdict,
    /// Its smallest reproduction.
    pub minimal: Option<Repro>,
}

/// The real-planner swarm's report.
#[derive(Clone, Debug, Serialize)]
pub struct RealCheckReport {
    /// Its format tag.
    pub format: &'static str,
    /// The planner recorded (version, source digest).
    pub planner: serde_json::Value,
    /// The seed.
    pub seed: u64,
    /// Cases per base.
    pub cases_per_base: u64,
    /// The shard.
    pub shard: String,
    /// Cases run.
    pub cases_run: u64,
    /// One row per base.
    pub bases: Vec<BaseRow>,
    /// Why draws did not apply (vLLM refused the layout), by reason.
    pub not_applicable: BTreeMap<String, u64>,
    /// Coverage goals: events counted.
    pub goals: BTreeMap<String, u64>,
    /// Goals never reached.
    pub missed_goals: Vec<String>,
    /// Goals the layouts cannot reach.
    pub goals_not_applicable: Vec<String>,
    /// Distinct findings.
    pub findings: Vec<RealFinding>,
}

impl RealCheckReport {
    /// Cases that failed.
    pub fn failed_cases(&self) -> u64 {
        self.bases.iter().map(|b| b.failed).sum()
    }
}

/// One case's result as the report keeps it.
pub struct CaseResult {
    /// The case index.
    pub index: u64,
    /// Its outcome.
    pub outcome: RealOutcome,
}

/// Record case `index`'s outcome in the report.
pub fn record_index(
    cfg: &RealCheckConfig,
    w: &mut crate::dynamo::Worker,
    i: u64,
) -> Result<(CaseResult, bool), RecordError> {
    let out = run_real_case(w, cfg.base(i), &cfg.case(i), &cfg.env)?;
    let lost = out.worker_lost;
    if std::env::var_os("KVSIM_DEBUG_CASES").is_some() {
        eprintln!(
            "case {i} {} {:?} -> {} {} steps",
            cfg.base(i).name,
            out.case,
            out.verdict.key(),
            out.steps
        );
    }
    Ok((CaseResult { index: i, outcome: out }, lost))
}

/// Run the swarm and shrink each distinct finding.
pub fn check_real(
    cfg: &RealCheckConfig,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<RealCheckReport, RecordError> {
    let indices = cfg.indices();
    let total = indices.len();
    let mut pool = Pool::new(cfg.jobs);
    let results = run_all(&mut pool, &indices, &|w, &i| record_index(cfg, w, i), &|done| {
        progress(done, total)
    })?;
    let mut rows: BTreeMap<String, BaseRow> = BTreeMap::new();
    for b in &cfg.bases {
        rows.insert(
            b.name.clone(),
            BaseRow {
                base: b.name.clone(),
                ..Default::default()
            },
        );
    }
    let mut reached: BTreeMap<String, u64> = BTreeMap::new();
    let mut na: BTreeMap<String, u64> = BTreeMap::new();
    let mut planner = serde_json::Value::Null;
    let mut first: BTreeMap<String, (u64, u64)> = BTreeMap::new(); // key -> (first index, count)
    let mut outcomes: BTreeMap<u64, RealOutcome> = BTreeMap::new();
    for r in results {
        let base = cfg.base(r.index).name.clone();
        let row = rows.get_mut(&base).expect("base row");
        row.cases += 1;
        let o = r.outcome;
        let mut keep = false;
        match &o.verdict {
            RealVerdict::NotApplicable { reason } => {
                row.not_applicable += 1;
                *na.entry(reason_class(reason)).or_default() += 1;
            }
            RealVerdict::Passed => row.passed += 1,
            v => {
                row.failed += 1;
                let e = first.entry(v.key()).or_insert((r.index, 0));
                e.1 += 1;
                keep = e.1 == 1; // the first case of each finding is shrunk
            }
        }
        row.ops += o.ops;
        row.steps += o.steps;
        for (k, v) in &o.events {
            *reached.entry(k.clone()).or_default() += v;
        }
        if planner.is_null() {
            if let Some(src) = &o.source {
                planner = planner_info(src);
            }
        }
        if keep {
            outcomes.insert(r.index, o);
        }
    }
    let slot = &mut pool.slots[0];
    let mut findings = Vec::new();
    for (key, (index, count)) in &first {
        let o = outcomes.remove(index).expect("kept failing outcome");
        let base = cfg.base(*index);
        let verdict = o.verdict.clone();
        // A hung or crashed child costs its whole wall limit per try and says
        // nothing about the knobs: it is reported as drawn, not shrunk.
        let case = o.case.clone().unwrap_or_else(|| cfg.case(*index));
        let minimal = if matches!(verdict, RealVerdict::Hung { .. } | RealVerdict::Crashed { .. }) {
            write_repro(cfg, key, case, o, 0)?
        } else {
            let shrunk = shrink_case(slot, base, case, o, &cfg.env, None)?;
            write_repro(cfg, key, shrunk.case, shrunk.outcome, shrunk.tries)?
        };
        findings.push(RealFinding {
            key: key.clone(),
            cases: *count,
            first_case: *index,
            base: base.name.clone(),
            verdict,
            minimal,
        });
    }
    let goals_na: Vec<String> = GOALS_NOT_APPLICABLE.iter().map(|(g, _)| g.to_string()).collect();
    let goals: BTreeMap<String, u64> = GOALS
        .iter()
        .map(|(g, _)| (g.to_string(), reached.get(*g).copied().unwrap_or(0)))
        .collect();
    let missed = goals::missed(&reached)
        .into_iter()
        .filter(|g| !goals_na.iter().any(|n| n == g))
        .map(String::from)
        .collect();
    Ok(RealCheckReport {
        format: "kvsim-check-dynamo/1",
        planner,
        seed: cfg.seed,
        cases_per_base: cfg.cases,
        shard: format!("{}/{}", cfg.shard.0, cfg.shard.1),
        cases_run: total as u64,
        bases: rows.into_values().collect(),
        not_applicable: na,
        goals,
        missed_goals: missed,
        goals_not_applicable: goals_na,
        findings,
    })
}

/// A refusal's reason without its figures (so like refusals count together).
fn reason_class(reason: &str) -> String {
    let head: String = reason.chars().take(90).collect();
    head.chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).collect()
}

/// The planner's identity for a report, from a recording's source.
pub fn planner_info(src: &kvsim_core::plan::PlanSource) -> serde_json::Value {
    serde_json::json!({
        "planner": src.planner,
        "version": src.version,
        "vllm": src.vllm,
        "source_sha256": src.source_sha256,
        "installed": src.installed,
    })
}

fn file_stem(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

fn write_json(path: &Path, v: &impl Serialize) -> Result<(), RecordError> {
    let mut text = serde_json::to_string_pretty(v).expect("serializes");
    text.push('\n');
    crate::output::write_atomic(path, text.as_bytes())
        .map_err(|e| RecordError::Io(format!("cannot write {}: {e}", path.display())))
}

/// Write the minimal scenario and its recorded plan; the reproducing command.
pub fn write_repro(
    cfg: &RealCheckConfig,
    name: &str,
    case: RealCase,
    out: RealOutcome,
    tries: usize,
) -> Result<Option<Repro>, RecordError> {
    let (Some(s), Some(o)) = (out.scenario.as_ref(), out.options.as_ref()) else {
        return Ok(None);
    };
    std::fs::create_dir_all(&cfg.plans_dir)
        .map_err(|e| RecordError::Io(format!("cannot create {}: {e}", cfg.plans_dir.display())))?;
    let stem = format!("dynamo-{}", file_stem(name));
    let scenario_file = cfg.plans_dir.join(format!("{stem}.scenario.json"));
    let plan_file = cfg.plans_dir.join(format!("{stem}.plan.json"));
    write_json(&scenario_file, s)?;
    if let Some(p) = &out.plan {
        write_json(&plan_file, p as &Plan)?;
    }
    let mut cmd = vec![
        "kvsim dynamo run".to_string(),
        format!("--scenario-file {}", scenario_file.display()),
    ];
    cmd.extend(o.run_flags());
    if let Some(f) = &cfg.planner_flag {
        cmd.push(f.clone());
    }
    cmd.push(format!(
        "--plan-out {}",
        cfg.plans_dir.join(format!("{stem}.replay.json")).display()
    ));
    Ok(Some(Repro {
        knobs: Some(case),
        verdict: Some(out.verdict),
        tries,
        scenario_file: scenario_file.display().to_string(),
        plan_file: if out.plan.is_some() {
            plan_file.display().to_string()
        } else {
            String::new()
        },
        command: cmd.join(" "),
    }))
}
