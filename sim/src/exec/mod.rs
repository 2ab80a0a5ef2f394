//! The deterministic simulator executor: runs a plan against the core model
//! step by step on a virtual clock, checks every invariant of the catalog after
//! every op, and stops at the first violation with a report.
//!
//! Determinism: no wall clock, no threads, no hash-map iteration reaches the
//! report or the trace; the same plan gives the same bytes.

mod coordinates;
mod perfetto;
mod report;

use kvsim_core::bugs::Mutant;
use kvsim_core::driver::{drive, Driven, Flow, Observer, OpAt};
use kvsim_core::engine::{Engine, Mismatch, OpOutcome};
use kvsim_core::fpm::sweep::BenchmarkMeta;
use kvsim_core::invariants::model::check_model;
use kvsim_core::invariants::planner::PointCoordinate;
use kvsim_core::invariants::ranks::check_lockstep;
use kvsim_core::invariants::record::check_regime_labels;
use kvsim_core::invariants::watch::ModelWatch;
use kvsim_core::invariants::Violation;
use kvsim_core::kv::changes::ModelChanges;
use kvsim_core::plan::{nominal_step_ns, Plan, PlanOp};
use serde_json::json;
use std::collections::BTreeMap;

pub use perfetto::perfetto_json;

pub use report::{Finding, Outcome, RunReport, SimResult, TraceEvent};

/// Model-changing ops between two full scans of the model in incremental mode
/// (checkpoints; the run's end is one too).
pub const CHECKPOINT_OPS: u64 = 1024;

/// Whether an op can change ref counts, the free queue, the prefix cache or a table: the
/// ops after which the model invariants are checked.
fn touches_pool(op: &PlanOp) -> bool {
    !matches!(
        op,
        PlanOp::AddRequest { .. }
            | PlanOp::Forward { .. }
            | PlanOp::FakeCompute { .. }
            | PlanOp::ZeroBlocks { .. }
            | PlanOp::CopyBlock { .. }
            | PlanOp::BeginTimed { .. }
            | PlanOp::EndTimed { .. }
            | PlanOp::InjectPoint { .. }
            | PlanOp::HostWork { .. }
            | PlanOp::EndSweep
            | PlanOp::Observe(_)
            | PlanOp::PlannerFailed { .. }
    )
}

/// Deterministic digest of a plan (canonical JSON, xxh3-128).
pub fn plan_hash(plan: &Plan) -> String {
    let text = serde_json::to_string(plan).expect("plans serialize");
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(text.as_bytes()))
}

/// How to run a plan.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// A deliberate bug in the engine (`--mutant`).
    pub mutant: Option<Mutant>,
    /// Record the op trace (off for the checker's many runs).
    pub trace: bool,
    /// Scan the whole model after every op (`--paranoid`) instead of what the op changed
    /// plus a full scan every `CHECKPOINT_OPS` ops and at the end.
    pub paranoid: bool,
    /// Put the plan's hash in the report (a JSON serialisation of the whole plan: the
    /// checker's many runs, which never show it, skip it).
    pub hash: bool,
}

impl RunOptions {
    /// No trace, the incremental model checks: the checker's many runs.
    pub fn quiet(mutant: Option<Mutant>) -> Self {
        RunOptions {
            mutant,
            trace: false,
            paranoid: false,
            hash: false,
        }
    }
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            mutant: None,
            trace: true,
            paranoid: false,
            hash: true,
        }
    }
}

/// Run a (validated) plan on the simulator.
pub fn run_plan(plan: &Plan) -> RunReport {
    run_plan_opts(plan, RunOptions::default(), &mut |_, _| {})
}

/// `run_plan`, reporting (ops done, ops total) after every step (for progress bars;
/// nothing of it reaches the report).
pub fn run_plan_with_progress(plan: &Plan, progress: &mut dyn FnMut(u64, u64)) -> RunReport {
    run_plan_opts(plan, RunOptions::default(), progress)
}

/// Events per rank that tell a rank's local decisions apart (ranks disagreeing).
fn local_decisions(e: &Engine) -> (u64, u64) {
    let get = |k| e.events.get(k).copied().unwrap_or(0);
    (get("registration-failed"), get("shed"))
}

/// Coverage events of the whole run: every rank's engine events, evictions of
/// cached blocks, and ranks disagreeing.
fn collect_events(engines: &[Engine], disagreed: bool, report: &mut RunReport) {
    for e in engines {
        for (k, v) in &e.events {
            *report.events.entry((*k).to_string()).or_default() += v;
        }
        let ev = e.kv.pool.evictions();
        if ev > 0 {
            *report.events.entry("prefix-block-evicted".into()).or_default() += ev;
        }
    }
    if disagreed {
        *report.events.entry("ranks-disagree".into()).or_default() += 1;
    }
}

/// `run_plan` with options.
pub fn run_plan_opts(plan: &Plan, opts: RunOptions, progress: &mut dyn FnMut(u64, u64)) -> RunReport {
    let mut engines = Vec::new();
    let mut disagreed = false;
    let meta = plan
        .benchmark
        .as_ref()
        .and_then(|b| serde_json::from_value::<BenchmarkMeta>(b.clone()).ok());
    let coordinates = coordinates::point_coordinates(plan, meta.as_ref());
    let mut report = run_inner(plan, opts, progress, &mut engines, &mut disagreed, coordinates);
    if report.passed() {
        if let Some(meta) = meta {
            if let Some(v) = check_regime_labels(meta.executions.iter().map(|e| e.regime_row())) {
                report.outcome = Outcome::Violation(
                    Finding::at(report.last_step, 0, None, json!(null), v.detail).with_invariant(v.id.as_str()),
                );
            }
        }
    }
    collect_events(&engines, disagreed, &mut report);
    report
}

/// The simulator as a plan observer: traces every op, runs the model invariants after every
/// op that can change the pool or a table, the lock-step check after every step, and stops at
/// the first violation or plan/model mismatch.
struct Simulator<'a> {
    opts: RunOptions,
    progress: &'a mut dyn FnMut(u64, u64),
    report: RunReport,
    total_ops: u64,
    /// Virtual clock at the current step's start (ns).
    clock: u64,
    /// Forward tokens of the current step (its nominal duration).
    step_tokens: u64,
    disagreed: bool,
    /// One incremental model watch per rank (unused when paranoid).
    watches: Vec<ModelWatch>,
    /// Per rank: model-changing ops since its last full scan.
    since_full: Vec<u64>,
    /// Changes of the ops not checked after (faults at a step's start land in the next
    /// op's changes; an op that cannot change the model is not checked after).
    pending: Vec<ModelChanges>,
}

impl Simulator<'_> {
    /// The model invariants after an op: the full scan when paranoid or at a checkpoint,
    /// else the incremental look at what the op changed.
    fn model_check(&mut self, rank: u32, e: &Engine, changes: ModelChanges) -> Vec<Violation> {
        let retained = e.retained();
        if self.opts.paranoid {
            return check_model(&e.kv, &retained);
        }
        let mut changes = changes;
        changes.merge(std::mem::take(&mut self.pending[rank as usize]));
        let (w, since) = (&mut self.watches[rank as usize], &mut self.since_full[rank as usize]);
        *since += 1;
        if *since >= CHECKPOINT_OPS {
            *since = 0;
            return w.full(&e.kv, &retained);
        }
        w.check(&e.kv, &retained, &changes)
    }

    /// The last checkpoint: a full scan of every rank once the plan has run, when an op
    /// was checked only incrementally since the last one.
    fn final_check(&mut self, engines: &[Engine], last_step: u64) {
        for (rank, e) in (0u32..).zip(engines) {
            if self.since_full[rank as usize] == 0 {
                continue;
            }
            if let Some(first) = check_model(&e.kv, &e.retained()).into_iter().next() {
                let f = Finding::at(last_step, rank, None, json!(null), first.detail)
                    .with_invariant(first.id.as_str())
                    .with_state(report::state_excerpt(e));
                self.report.outcome = Outcome::Violation(f);
                return;
            }
        }
    }

    fn stop(&mut self, finding: Outcome, step: u64) -> Flow {
        self.report.outcome = finding;
        self.report.finish(self.clock, step);
        Flow::Stop
    }
}

impl Observer for Simulator<'_> {
    fn fault(&mut self, step: u64, rank: u32, event: String) {
        if self.opts.trace {
            self.report.trace.push(TraceEvent::fault(self.clock, step, rank, event));
        }
    }

    fn before_op(&mut self, _at: OpAt, _e: &Engine, op: &PlanOp) {
        if let PlanOp::Forward { batch } = op {
            self.step_tokens += batch.iter().map(|b| b.tokens).sum::<u64>();
        }
        self.report.ops += 1;
    }

    fn after_op(&mut self, at: OpAt, e: &Engine, op: &PlanOp, outcome: Result<OpOutcome, Mismatch>) -> Flow {
        let OpAt { step, rank, index: i } = at;
        let op_json = || serde_json::to_value(op).expect("ops serialize");
        match outcome {
            Err(m) => {
                if self.opts.trace {
                    let line = format!("MISMATCH: {}", m.0);
                    self.report
                        .trace
                        .push(TraceEvent::op(self.clock, step, rank, i, &op_json(), line));
                }
                let f = Finding::at(step, rank, Some(i), op_json(), m.0);
                self.stop(Outcome::Mismatch(f), step)
            }
            Ok(out) => {
                if self.opts.trace {
                    self.report
                        .trace
                        .push(TraceEvent::op(self.clock, step, rank, i, &op_json(), out.result));
                }
                let mut v: Vec<Violation> = out.violations;
                // Model invariants are functions of the pool and the tables; ops
                // that cannot change either keep the previous (passing) result.
                if touches_pool(op) {
                    v.extend(self.model_check(rank, e, out.changes));
                } else if !out.changes.is_empty() {
                    self.pending[rank as usize].merge(out.changes);
                }
                match v.into_iter().next() {
                    Some(first) => {
                        let f = Finding::at(step, rank, Some(i), op_json(), first.detail)
                            .with_invariant(first.id.as_str())
                            .with_state(report::state_excerpt(e));
                        self.stop(Outcome::Violation(f), step)
                    }
                    None => Flow::Continue,
                }
            }
        }
    }

    fn end_step(&mut self, step: u64, engines: &[Engine]) -> Flow {
        let injected: Vec<Option<u64>> = engines.iter().map(|e| e.injected).collect();
        if let Some(v) = check_lockstep(step, &injected) {
            let f = Finding::at(step, 0, None, json!(null), v.detail).with_invariant(v.id.as_str());
            return self.stop(Outcome::Violation(f), step);
        }
        self.disagreed |= engines
            .windows(2)
            .any(|w| local_decisions(&w[0]) != local_decisions(&w[1]));
        self.clock += nominal_step_ns(std::mem::take(&mut self.step_tokens));
        self.report.steps += 1;
        (self.progress)(self.report.ops, self.total_ops);
        Flow::Continue
    }
}

fn run_inner(
    plan: &Plan,
    opts: RunOptions,
    progress: &mut dyn FnMut(u64, u64),
    engines_out: &mut Vec<Engine>,
    disagreed: &mut bool,
    coordinates: Vec<BTreeMap<u64, PointCoordinate>>,
) -> RunReport {
    let s = &plan.scenario;
    let mut report = RunReport::new(if opts.hash { plan_hash(plan) } else { String::new() });
    let mut engines: Vec<Engine> = match (0..s.dp_ranks)
        .map(|r| Engine::with_mutant(s, r, opts.mutant))
        .collect()
    {
        Ok(e) => e,
        Err(m) => {
            report.outcome = Outcome::Mismatch(Finding::at(0, 0, None, json!(null), m.0));
            return report;
        }
    };
    for (e, c) in engines.iter_mut().zip(coordinates) {
        e.coordinates = c;
    }
    let mut sim = Simulator {
        opts,
        progress,
        report,
        total_ops: plan.steps.iter().map(|s| s.ops.len() as u64).sum(),
        clock: 0,
        step_tokens: 0,
        disagreed: false,
        watches: engines
            .iter_mut()
            .map(|e| {
                let retained = e.retained();
                ModelWatch::new(&mut e.kv, &retained)
            })
            .collect(),
        since_full: vec![0; engines.len()],
        pending: vec![ModelChanges::default(); engines.len()],
    };
    if let Driven::Finished { last_step } = drive(plan, &mut engines, &mut sim) {
        if !sim.opts.paranoid {
            sim.final_check(&engines, last_step);
        }
        sim.report.finish(sim.clock, last_step);
    }
    *engines_out = engines;
    *disagreed = sim.disagreed;
    sim.report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{load_plan, prefill_ops, tiny_scenario, PlanBuilder};

    // A decode-KV variance from the unseen-swa sweep plan's benchmark record: serde_json without
    // its float_roundtrip feature parses this text one ulp low (0.2469135802469135).
    const VARIANCE: f64 = 0.24691358024691354;

    #[test]
    fn floats_parse_to_the_f64_they_were_written_from() {
        for x in [VARIANCE, 0.1 + 0.2, 1.0 / 3.0, 2.0f64.sqrt(), 6e54, 9e186, 5.8e45] {
            let text = serde_json::to_string(&x).unwrap();
            let back: f64 = serde_json::from_str(&text).unwrap();
            assert_eq!(back.to_bits(), x.to_bits(), "{text} read back as {back:?}");
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(value.as_f64().map(f64::to_bits), Some(x.to_bits()), "{text} as a Value");
        }
    }

    #[test]
    fn a_plan_read_back_from_its_file_has_the_same_hash() {
        // The plan hash must not depend on the build (`cargo build` vs `cargo build -p kvsim`
        // once gave `kvsim predict` two hashes of one plan file): hashing the plan a planner
        // wrote and the plan read back from the file must agree.
        let mut plan = PlanBuilder::new(tiny_scenario(Some(4), 1, 32))
            .step(0, 0, prefill_ops("a", 12))
            .build()
            .unwrap();
        plan.benchmark = Some(json!({"decode_kv_variance": [VARIANCE, 0.1 + 0.2, 1.0 / 3.0, 6e54]}));
        let written = plan_hash(&plan);
        for text in [
            serde_json::to_string(&plan).unwrap(),
            serde_json::to_string_pretty(&plan).unwrap(),
        ] {
            let back = load_plan(&text).unwrap();
            assert_eq!(plan_hash(&back), written, "{:?}", back.benchmark);
            assert_eq!(back, plan);
        }
    }
}
