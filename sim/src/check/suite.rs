//! The `kvsim check` driver: cases over every scenario (round robin, seeded per
//! index, sharded by index), the per-scenario table, coverage goals, and the
//! mutant hunt with shrinking and replay.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use kvsim_core::bugs::Mutant;
use kvsim_core::fpm::scenarios::BuiltinScenario;
use kvsim_core::invariants::catalog::CATALOG;
use kvsim_core::plan::{load_plan, Plan};

use super::case::CaseSpec;
use super::case_seed;
use super::goals;
use super::par::par_map;
use super::run::{case_plan, run_case, Verdict};
use super::shrink::{op_count, shrink};
use crate::exec::{run_plan_opts, Outcome, RunOptions};

/// A `kvsim check` run: seed, cases, shard, scenarios, threads.
pub struct CheckConfig {
    /// The run's seed.
    pub seed: u64,
    /// Cases per scenario (before sharding).
    pub cases: u64,
    /// (k, n): this run takes case indices i with i % n == k − 1.
    pub shard: (u64, u64),
    /// The scenarios, in order (case i is scenario i mod N).
    pub scenarios: Vec<BuiltinScenario>,
    /// Only this case index (to reproduce one case of a report).
    pub only: Option<u64>,
    /// Threads that run cases and the exhaustive pass (beside them); any number gives
    /// the same report.
    pub jobs: usize,
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

    /// Case `index`'s knobs for `base` (drawn from the run's seed and the index).
    pub fn spec(&self, index: u64, base: &BuiltinScenario) -> CaseSpec {
        CaseSpec::draw(&mut ChaCha8Rng::seed_from_u64(case_seed(self.seed, index)), base)
    }

    /// The exhaustive pass is one search that cannot be cut into pieces whose counts
    /// sum (spec/exhaustive.md §4, Shards): the last shard runs it (the last has no more cases
    /// than the others), a run of one `--case` does not.
    fn runs_exhaustive(&self) -> bool {
        self.only.is_none() && self.shard.0 == self.shard.1
    }
}

/// One scenario's row of the report.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScenarioRow {
    /// The scenario.
    pub scenario: String,
    /// Cases drawn.
    pub cases: u64,
    /// Cases that did not apply.
    pub not_applicable: u64,
    /// Why those cases did not apply (`Verdict::na_reason`), counted.
    pub not_applicable_reasons: BTreeMap<String, u64>,
    /// Cases that passed.
    pub passed: u64,
    /// Cases that failed.
    pub failed: u64,
    /// Ops run.
    pub ops: u64,
    /// Invariants never violated in this scenario's cases, of the catalog's.
    pub invariants_held: usize,
    /// Invariants in the catalog.
    pub invariants_total: usize,
    /// Failures by label (invariant ID or kind).
    pub failures: BTreeMap<String, u64>,
    /// Coverage goals its cases reached.
    pub goals_reached: Vec<String>,
}

impl ScenarioRow {
    /// Fill in what follows from the counts: the invariants held (of the labels failed)
    /// and the goals reached (of the scenario's event counts).
    pub(super) fn finish(&mut self, reached: impl Fn(&str) -> bool) {
        self.invariants_total = CATALOG.len();
        self.invariants_held = CATALOG
            .iter()
            .filter(|c| !self.failures.contains_key(c.id.as_str()))
            .count();
        self.goals_reached = goals::GOALS
            .iter()
            .filter(|(g, _)| reached(g))
            .map(|(g, _)| g.to_string())
            .collect();
    }
}

/// One failing case.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    /// Its index in the run.
    pub case: u64,
    /// Its scenario.
    pub scenario: String,
    /// Its knobs.
    pub spec: CaseSpec,
    /// Its verdict.
    pub verdict: Verdict,
    /// Ops of the failing plan.
    pub original_ops: usize,
    /// Ops after shrinking.
    pub shrunk_ops: usize,
    /// The shrunk plan (written by the CLI).
    #[serde(skip)]
    pub plan: Option<Plan>,
}

/// The report's format tag.
pub const CHECK_FORMAT: &str = "kvsim-check/1";

/// A `kvsim check --json` report (`kvsim-check/1`).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckReport {
    /// `kvsim-check/1`.
    pub format: String,
    /// The seed.
    pub seed: u64,
    /// Cases per scenario.
    pub cases_per_scenario: u64,
    /// The scenarios of the run, in order (a shard may have no case of some).
    pub scenario_names: Vec<String>,
    /// The shard (`K/N`).
    pub shard: String,
    /// The `--case` this report was restricted to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case: Option<u64>,
    /// Cases run.
    pub cases_run: u64,
    /// One row per scenario.
    pub scenarios: Vec<ScenarioRow>,
    /// Coverage goals: events counted.
    pub goals: BTreeMap<String, u64>,
    /// Goals never reached.
    pub missed_goals: Vec<String>,
    /// Failing cases.
    pub failures: Vec<Failure>,
    /// `null` in a report that did not run it (`CheckConfig::runs_exhaustive`).
    pub exhaustive: Option<ExhaustiveSummary>,
}

/// The bounded exhaustive passes over a tiny pool (spec/exhaustive.md): the default bounds
/// (one full-attention group), then the hybrid bounds (full attention and two windows).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExhaustiveSummary {
    /// States explored.
    pub states: u64,
    /// Op sequences covered.
    pub sequences: String,
    /// The depth.
    pub depth: usize,
    /// The first violation, if any.
    pub violation: Option<String>,
    /// The second exhaustive pass, over full attention plus two windows.
    pub hybrid: HybridSummary,
}

/// The exhaustive pass over `Bounds::hybrid()`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HybridSummary {
    /// States explored.
    pub states: u64,
    /// Op sequences covered.
    pub sequences: String,
    /// The depth.
    pub depth: usize,
    /// The first violation, if any.
    pub violation: Option<String>,
    /// The shortest op sequence after which the hybrid coordinator's fixed point re-asked a
    /// group at a shorter hit (the `hybrid-fixed-point` goal), if any.
    pub fixed_point: Option<String>,
}

fn ops_text(ops: &[crate::exhaustive::Op]) -> String {
    ops.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// One search: (states, sequences, depth, violation, the report).
fn search(
    bounds: &crate::exhaustive::Bounds,
    progress: &mut dyn FnMut(u64, u64),
) -> (
    u64,
    String,
    usize,
    Option<String>,
    Option<crate::exhaustive::ExhaustiveReport>,
) {
    match crate::exhaustive::explore_jobs(bounds, None, 1, progress) {
        Ok(r) => (
            r.states,
            r.sequences.to_string(),
            r.depth,
            r.first_violation
                .as_ref()
                .map(|c| format!("{:?} after {}", c.violations, ops_text(&c.ops))),
            Some(r),
        ),
        Err(e) => (0, "0".into(), 0, Some(format!("bad bounds: {:?}", e.0)), None),
    }
}

/// The default bounds' search (states, sequences, depth, violation).
type DefaultPass = (u64, String, usize, Option<String>);

fn default_pass(progress: &mut dyn FnMut(u64, u64)) -> DefaultPass {
    let (states, sequences, depth, violation, _) = search(&crate::exhaustive::Bounds::default(), progress);
    (states, sequences, depth, violation)
}

fn hybrid_pass() -> HybridSummary {
    let (states, sequences, depth, violation, report) = search(&crate::exhaustive::Bounds::hybrid(), &mut |_, _| {});
    let fixed_point = report.and_then(|r| {
        r.reached
            .get(&crate::exhaustive::Event::FixedPointReask)
            .map(|ops| ops_text(ops))
    });
    HybridSummary {
        states,
        sequences,
        depth,
        violation,
        fixed_point,
    }
}

fn exhaustive_summary((states, sequences, depth, violation): DefaultPass, hybrid: HybridSummary) -> ExhaustiveSummary {
    ExhaustiveSummary {
        states,
        sequences,
        depth,
        violation,
        hybrid,
    }
}

impl CheckReport {
    /// No failure; and every goal reached (`require_goals`).
    pub fn passed(&self, require_goals: bool) -> bool {
        self.failures.is_empty()
            && self
                .exhaustive
                .as_ref()
                .is_none_or(|x| x.violation.is_none() && x.hybrid.violation.is_none())
            && (!require_goals || self.missed_goals.is_empty())
    }

    /// The whole run (one shard of one, every case): the goals are enforced on it.
    pub fn is_whole_run(&self) -> bool {
        self.shard == "1/1" && self.case.is_none()
    }

    /// Whether the coverage goals bind this report: a whole run over every built-in scenario.
    /// The goals are targets for kvsim's own scenarios; a run over a subset of them or over
    /// the user's scenario files (`--scenario`, `--scenario-file`) reports them only.
    pub fn goals_enforced(&self) -> bool {
        let builtin: Vec<String> = kvsim_core::fpm::scenarios::builtin_scenarios()
            .into_iter()
            .map(|s| s.name)
            .collect();
        self.is_whole_run() && self.scenario_names == builtin
    }
}

/// A scenario's row and its event counts.
type Tally = (ScenarioRow, BTreeMap<String, u64>);

/// Run the suites without mutants. `progress(done, total)` is called per case.
pub fn check(cfg: &CheckConfig, progress: &mut dyn FnMut(u64, u64)) -> CheckReport {
    check_with(cfg, progress, &mut |_, _| {})
}

/// `check`, with `exhaustive(levels done, levels)` called along the exhaustive pass.
pub fn check_with(
    cfg: &CheckConfig,
    progress: &mut dyn FnMut(u64, u64),
    exhaustive: &mut dyn FnMut(u64, u64),
) -> CheckReport {
    let cases: Vec<(u64, &BuiltinScenario)> = cfg.indices().collect();
    let total = cases.len() as u64;
    let run = |&(i, base): &(u64, &BuiltinScenario)| {
        let spec = cfg.spec(i, base);
        let out = run_case(base, &spec, None);
        (spec, out)
    };
    // With two threads or more, the exhaustive pass's default search runs on one of them
    // beside the cases, and its small hybrid search after the cases. The default search
    // stays on its thread: on the 2-core machine its threaded expansion (`explore_jobs`)
    // was 1.1x faster on two threads (the fold between batches is serial), which left it
    // longer than the cases beside it.
    let (outcomes, summary) = if cfg.runs_exhaustive() && cfg.jobs > 1 {
        let levels = AtomicU64::new(0);
        std::thread::scope(|scope| {
            let search = scope.spawn(|| default_pass(&mut |done, _| levels.store(done, Ordering::Relaxed)));
            let outcomes = par_map(&cases, cfg.jobs - 1, run, progress);
            let hybrid = hybrid_pass();
            let max_ops = crate::exhaustive::Bounds::default().max_ops as u64;
            while !search.is_finished() {
                exhaustive(levels.load(Ordering::Relaxed), max_ops);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            exhaustive(max_ops, max_ops);
            let default = search.join().expect("the exhaustive pass panicked");
            (outcomes, Some(exhaustive_summary(default, hybrid)))
        })
    } else {
        let outcomes = par_map(&cases, cfg.jobs, run, progress);
        let summary = cfg
            .runs_exhaustive()
            .then(|| exhaustive_summary(default_pass(exhaustive), hybrid_pass()));
        (outcomes, summary)
    };
    let mut rows: BTreeMap<String, Tally> = BTreeMap::new();
    let mut all_goals: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures = Vec::new();
    for (&(i, base), (spec, out)) in cases.iter().zip(outcomes) {
        let (row, ev) = rows.entry(base.name.clone()).or_default();
        row.scenario.clone_from(&base.name);
        row.cases += 1;
        row.ops += out.ops;
        match &out.verdict {
            Verdict::NotApplicable { .. } => {
                row.not_applicable += 1;
                *row.not_applicable_reasons.entry(out.verdict.na_reason()).or_default() += 1;
            }
            Verdict::Passed => row.passed += 1,
            v => {
                row.failed += 1;
                *row.failures.entry(v.label().to_string()).or_default() += 1;
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
    }
    let scenarios = cfg
        .scenarios
        .iter()
        .filter_map(|s| rows.remove(&s.name))
        .map(|(mut row, ev)| {
            row.finish(|g| ev.get(g).copied().unwrap_or(0) > 0);
            row
        })
        .collect::<Vec<_>>();
    // The hybrid fixed point is a model event the exhaustive pass reaches.
    if summary.as_ref().is_some_and(|x| x.hybrid.fixed_point.is_some()) {
        *all_goals.entry("hybrid-fixed-point".into()).or_default() += 1;
    }
    let goal_counts: BTreeMap<String, u64> = goals::GOALS
        .iter()
        .map(|(g, _)| (g.to_string(), all_goals.get(*g).copied().unwrap_or(0)))
        .collect();
    CheckReport {
        format: CHECK_FORMAT.to_string(),
        seed: cfg.seed,
        cases_per_scenario: cfg.cases,
        scenario_names: cfg.scenarios.iter().map(|s| s.name.clone()).collect(),
        shard: format!("{}/{}", cfg.shard.0, cfg.shard.1),
        case: cfg.only,
        cases_run: total,
        missed_goals: goals::missed(&all_goals).into_iter().map(str::to_string).collect(),
        goals: goal_counts,
        scenarios,
        failures,
        exhaustive: summary,
    }
}

/// One mutant's row of the hunt.
#[derive(Clone, Debug, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct MutantRow {
    /// The mutant.
    pub mutant: String,
    /// Its §8.2 bug number (seed bugs).
    pub bug: Option<u32>,
    /// The invariant that must catch it.
    pub expected: String,
    /// Whether a case caught it with that invariant.
    pub killed: bool,
    /// The invariant that caught it.
    pub invariant: Option<String>,
    /// Cases run until the kill (or the whole budget).
    pub cases: u64,
    /// Cases that failed with another invariant on the way (planner bugs the
    /// mutant exposed elsewhere, or the mutant caught by a different check).
    pub other_findings: BTreeMap<String, u64>,
    /// The scenario of the first kill.
    pub scenario: Option<String>,
    /// Its case index.
    pub case: Option<u64>,
    /// Ops of the failing plan.
    pub original_ops: Option<usize>,
    /// Ops after shrinking.
    pub shrunk_ops: Option<usize>,
    /// The shrunk plan, reloaded from its JSON and replayed, fails with the same invariant.
    pub replay_reproduces: bool,
    /// Whether replaying needs `--mutant`.
    pub in_engine: bool,
    /// Seconds the hunt took (not in `--json`).
    #[serde(skip)]
    pub seconds: f64,
    /// The shrunk plan.
    #[serde(skip)]
    pub plan: Option<Plan>,
}

/// Cases tried after a mutant's first kill for a smaller shrunk plan.
const EXTRA_CASES: u64 = 20;

/// Hunt every mutant of `mutants`, `cfg.jobs` at a time; the rows in `mutants`' order.
/// `progress(done, total)` is called per mutant hunted.
pub fn hunt_all(cfg: &CheckConfig, mutants: &[Mutant], progress: &mut dyn FnMut(u64, u64)) -> Vec<MutantRow> {
    par_map(mutants, cfg.jobs, |&m| hunt(cfg, m), progress)
}

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
        let out = run_case(base, &cfg.spec(i, base), Some(mutant));
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

/// A planner mutant's kill, whole: the failing case's plan and the same case planned without
/// the mutant (to time the bug's symptom: `kvsim replay FAILING --backend gpu --against FIXED`).
/// `None` for engine and model mutants (their plans hold no bug) and rows without a kill.
pub fn fixed_pair(cfg: &CheckConfig, row: &MutantRow, mutant: Mutant) -> Option<(Plan, Plan)> {
    let (name, i) = (row.scenario.as_deref()?, row.case?);
    let base = cfg.scenarios.iter().find(|b| b.name == name)?;
    if mutant.in_engine() {
        return None;
    }
    let spec = cfg.spec(i, base);
    Some((
        case_plan(base, &spec, Some(mutant)).ok()?,
        case_plan(base, &spec, None).ok()?,
    ))
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
