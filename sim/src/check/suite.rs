//! The `kvsim check` driver: cases over every scenario (round robin, seeded per
//! index, sharded by index), the per-scenario table, coverage goals, and the
//! mutant hunt with shrinking and replay.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use kvsim_core::bugs::Mutant;
use kvsim_core::fpm::scenarios::BuiltinScenario;
use kvsim_core::invariants::catalog::CATALOG;
use kvsim_core::plan::{load_plan, Plan};

use super::case::CaseSpec;
use super::case_seed;
use super::goals;
use super::run::{run_case, Verdict};
use super::shrink::{op_count, shrink};
use crate::exec::{run_plan_opts, Outcome, RunOptions};

pub struct CheckConfig {
    pub seed: u64,
    /// Cases per scenario (before sharding).
    pub cases: u64,
    /// (k, n): this run takes case indices i with i % n == k − 1.
    pub shard: (u64, u64),
    pub scenarios: Vec<BuiltinScenario>,
    /// Only this case index (to reproduce one case of a report).
    pub only: Option<u64>,
}

impl CheckConfig {
    /// The case indices of this shard, in order, with their scenario.
    fn indices(&self) -> impl Iterator<Item = (u64, &BuiltinScenario)> + '_ {
        let n = self.scenarios.len() as u64;
        let (k, shards) = self.shard;
        let only = self.only;
        (0..self.cases * n)
            .filter(move |i| i % shards == k - 1 && only.is_none_or(|o| o == *i))
            .map(move |i| (i, &self.scenarios[(i % n) as usize]))
    }

    fn spec(&self, index: u64) -> CaseSpec {
        CaseSpec::draw(&mut ChaCha8Rng::seed_from_u64(case_seed(self.seed, index)))
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ScenarioRow {
    pub scenario: String,
    pub cases: u64,
    pub not_applicable: u64,
    pub passed: u64,
    pub failed: u64,
    pub ops: u64,
    /// Invariants never violated in this scenario's cases, of the catalog's.
    pub invariants_held: usize,
    pub invariants_total: usize,
    pub failures: BTreeMap<String, u64>,
    pub goals_reached: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    pub case: u64,
    pub scenario: String,
    pub spec: CaseSpec,
    pub verdict: Verdict,
    pub original_ops: usize,
    pub shrunk_ops: usize,
    /// The shrunk plan (written by the CLI).
    #[serde(skip)]
    pub plan: Option<Plan>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    pub format: &'static str,
    pub seed: u64,
    pub cases_per_scenario: u64,
    pub shard: String,
    pub cases_run: u64,
    pub scenarios: Vec<ScenarioRow>,
    pub goals: BTreeMap<String, u64>,
    pub missed_goals: Vec<String>,
    pub failures: Vec<Failure>,
    pub exhaustive: ExhaustiveSummary,
}

/// The bounded exhaustive pass over a tiny pool (spec/exhaustive.md).
#[derive(Clone, Debug, Serialize)]
pub struct ExhaustiveSummary {
    pub states: u64,
    pub sequences: String,
    pub depth: usize,
    pub violation: Option<String>,
}

fn exhaustive_pass() -> ExhaustiveSummary {
    let bounds = crate::exhaustive::Bounds::default();
    match crate::exhaustive::explore(&bounds, None) {
        Ok(r) => ExhaustiveSummary {
            states: r.states,
            sequences: r.sequences.to_string(),
            depth: r.depth,
            violation: r.first_violation.map(|c| {
                let ops: Vec<String> = c.ops.iter().map(ToString::to_string).collect();
                format!("{:?} after {}", c.violations, ops.join("; "))
            }),
        },
        Err(e) => ExhaustiveSummary {
            states: 0,
            sequences: "0".into(),
            depth: 0,
            violation: Some(format!("bad bounds: {:?}", e.0)),
        },
    }
}

impl CheckReport {
    /// No failure; and every goal reached (`require_goals`).
    pub fn passed(&self, require_goals: bool) -> bool {
        self.failures.is_empty()
            && self.exhaustive.violation.is_none()
            && (!require_goals || self.missed_goals.is_empty())
    }
}

/// A scenario's row, the IDs violated in it, and its event counts.
type Tally = (ScenarioRow, BTreeSet<String>, BTreeMap<String, u64>);

/// Run the suites without mutants. `progress(done, total)` is called per case.
pub fn check(cfg: &CheckConfig, progress: &mut dyn FnMut(u64, u64)) -> CheckReport {
    let total = cfg.indices().count() as u64;
    let mut rows: BTreeMap<String, Tally> = BTreeMap::new();
    let mut all_goals: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut done = 0;
    for (i, base) in cfg.indices() {
        let spec = cfg.spec(i);
        let out = run_case(base, &spec, None);
        let (row, violated, ev) = rows.entry(base.name.clone()).or_default();
        row.scenario.clone_from(&base.name);
        row.cases += 1;
        row.ops += out.ops;
        match &out.verdict {
            Verdict::NotApplicable { .. } => row.not_applicable += 1,
            Verdict::Passed => row.passed += 1,
            v => {
                row.failed += 1;
                *row.failures.entry(v.label().to_string()).or_default() += 1;
                violated.insert(v.label().to_string());
            }
        }
        for (k, v) in &out.events {
            *ev.entry(k.clone()).or_default() += v;
            *all_goals.entry(k.clone()).or_default() += v;
        }
        // The first failure of each scenario is shrunk and kept.
        if out.verdict.failed() && !failures.iter().any(|f: &Failure| f.scenario == base.name) {
            let plan = out.plan.as_ref();
            let shrunk = match (&out.verdict, plan) {
                (Verdict::Violation { invariant, .. }, Some(p)) => Some(shrink(p, None, invariant)),
                _ => plan.cloned(),
            };
            failures.push(Failure {
                case: i,
                scenario: base.name.clone(),
                spec,
                verdict: out.verdict.clone(),
                original_ops: plan.map_or(0, op_count),
                shrunk_ops: shrunk.as_ref().map_or(0, op_count),
                plan: shrunk,
            });
        }
        done += 1;
        progress(done, total);
    }
    let scenarios = cfg
        .scenarios
        .iter()
        .filter_map(|s| rows.remove(&s.name))
        .map(|(mut row, violated, ev)| {
            row.invariants_total = CATALOG.len();
            row.invariants_held = CATALOG.iter().filter(|c| !violated.contains(c.id.as_str())).count();
            row.goals_reached = goals::GOALS
                .iter()
                .filter(|(g, _)| ev.get(*g).copied().unwrap_or(0) > 0)
                .map(|(g, _)| g.to_string())
                .collect();
            row
        })
        .collect::<Vec<_>>();
    let goal_counts: BTreeMap<String, u64> = goals::GOALS
        .iter()
        .map(|(g, _)| (g.to_string(), all_goals.get(*g).copied().unwrap_or(0)))
        .collect();
    CheckReport {
        format: "kvsim-check/1",
        seed: cfg.seed,
        cases_per_scenario: cfg.cases,
        shard: format!("{}/{}", cfg.shard.0, cfg.shard.1),
        cases_run: total,
        missed_goals: goals::missed(&all_goals).into_iter().map(str::to_string).collect(),
        goals: goal_counts,
        scenarios,
        failures,
        exhaustive: exhaustive_pass(),
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct MutantRow {
    pub mutant: String,
    pub bug: Option<u32>,
    pub expected: String,
    pub killed: bool,
    /// The invariant that caught it.
    pub invariant: Option<String>,
    /// Cases run until the kill (or the whole budget).
    pub cases: u64,
    /// Cases that failed with another invariant on the way (planner bugs the
    /// mutant exposed elsewhere, or the mutant caught by a different check).
    pub other_findings: BTreeMap<String, u64>,
    pub scenario: Option<String>,
    pub case: Option<u64>,
    pub original_ops: Option<usize>,
    pub shrunk_ops: Option<usize>,
    /// The shrunk plan, reloaded from its JSON and replayed, fails with the same invariant.
    pub replay_reproduces: bool,
    pub in_engine: bool,
    #[serde(skip)]
    pub seconds: f64,
    #[serde(skip)]
    pub plan: Option<Plan>,
}

/// Cases tried after a mutant's first kill for a smaller shrunk plan.
const EXTRA_CASES: u64 = 20;

/// Hunt one mutant: cases in index order until one fails with the mutant's
/// invariant, then shrink and replay (keeping the smallest of the kills found
/// within `EXTRA_CASES` more cases).
pub fn hunt(cfg: &CheckConfig, mutant: Mutant) -> MutantRow {
    let t0 = Instant::now();
    let mut row = MutantRow {
        mutant: mutant.name().to_string(),
        bug: mutant.bug().map(|b| b.info().bug),
        expected: mutant.invariant().to_string(),
        killed: false,
        invariant: None,
        cases: 0,
        other_findings: BTreeMap::new(),
        scenario: None,
        case: None,
        original_ops: None,
        shrunk_ops: None,
        replay_reproduces: false,
        in_engine: mutant.in_engine(),
        seconds: 0.0,
        plan: None,
    };
    // After the first kill, a few more cases are tried and the smallest shrunk
    // plan kept (`cases` still counts the cases up to the first kill).
    let mut window_left: Option<u64> = None;
    for (i, base) in cfg.indices() {
        match window_left.as_mut() {
            Some(0) => break,
            Some(n) => *n -= 1,
            None => row.cases += 1,
        }
        let out = run_case(base, &cfg.spec(i), Some(mutant));
        let first = window_left.is_none();
        if out.verdict.failed() && first {
            *row.other_findings.entry(out.verdict.label().to_string()).or_default() += 1;
        }
        let (Verdict::Violation { invariant, .. }, Some(plan)) = (&out.verdict, &out.plan) else {
            continue;
        };
        if !mutant.caught_by(invariant) {
            continue;
        }
        if first {
            *row.other_findings.get_mut(invariant.as_str()).expect("counted above") -= 1;
            row.other_findings.retain(|_, n| *n > 0);
            window_left = Some(EXTRA_CASES);
        }
        // Only plans no larger than the first kill's are worth shrinking again.
        if row.original_ops.is_some_and(|n| op_count(plan) > n) {
            continue;
        }
        let small = shrink(plan, mutant.in_engine().then_some(mutant), invariant);
        if row.shrunk_ops.is_some_and(|n| n <= op_count(&small)) {
            continue;
        }
        row.killed = true;
        row.replay_reproduces = replays_to(&small, mutant, invariant);
        row.invariant = Some(invariant.clone());
        row.scenario = Some(base.name.clone());
        row.case = Some(i);
        row.original_ops = Some(op_count(plan));
        row.shrunk_ops = Some(op_count(&small));
        row.plan = Some(small);
    }
    row.seconds = t0.elapsed().as_secs_f64();
    row
}

/// The plan, written as JSON and loaded back as `kvsim replay` would, fails with `invariant`.
fn replays_to(plan: &Plan, mutant: Mutant, invariant: &str) -> bool {
    let text = serde_json::to_string_pretty(plan).expect("plans serialize");
    let Ok(loaded) = load_plan(&text) else {
        return false;
    };
    let opts = RunOptions::quiet(mutant.in_engine().then_some(mutant));
    let r = run_plan_opts(&loaded, opts, &mut |_, _| {});
    matches!(&r.outcome, Outcome::Violation(f) if f.invariant.as_deref() == Some(invariant))
}
