//! The deterministic simulator executor: runs a plan against the core model
//! step by step on a virtual clock, checks every invariant of the catalog after
//! every op, and stops at the first violation with a report.
//!
//! Determinism: no wall clock, no threads, no hash-map iteration reaches the
//! report or the trace; the same plan gives the same bytes.

mod perfetto;
mod report;

use std::collections::BTreeMap;

use kvsim_core::bugs::Mutant;
use kvsim_core::engine::Engine;
use kvsim_core::fpm::sweep::BenchmarkMeta;
use kvsim_core::invariants::model::check_model;
use kvsim_core::invariants::ranks::check_lockstep;
use kvsim_core::invariants::record::check_regime_labels;
use kvsim_core::invariants::Violation;
use kvsim_core::plan::{nominal_step_ns, Plan, PlanOp};
use serde_json::json;

pub use perfetto::perfetto_json;

pub use report::{Finding, Outcome, RunReport, TraceEvent};

/// Whether an op can change ref counts, the free queue, the prefix cache or a table.
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

fn apply_faults(plan: &Plan, step: u64, e: &mut Engine, events: &mut Vec<String>) {
    events.extend(plan.faults.iter().filter_map(|f| e.apply_fault(f, step)));
}

/// How to run a plan.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// A deliberate bug in the engine (`--mutant`).
    pub mutant: Option<Mutant>,
    /// Record the op trace (off for the checker's many runs).
    pub trace: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            mutant: None,
            trace: true,
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
    let mut report = run_inner(plan, opts, progress, &mut engines, &mut disagreed);
    if report.passed() {
        if let Some(meta) = plan
            .benchmark
            .as_ref()
            .and_then(|b| serde_json::from_value::<BenchmarkMeta>(b.clone()).ok())
        {
            if let Some(v) = check_regime_labels(&meta.executions) {
                report.outcome = Outcome::Violation(
                    Finding::at(report.last_step, 0, None, json!(null), v.detail).with_invariant(v.id),
                );
            }
        }
    }
    collect_events(&engines, disagreed, &mut report);
    report
}

fn run_inner(
    plan: &Plan,
    opts: RunOptions,
    progress: &mut dyn FnMut(u64, u64),
    engines_out: &mut Vec<Engine>,
    disagreed: &mut bool,
) -> RunReport {
    let total_ops: u64 = plan.steps.iter().map(|s| s.ops.len() as u64).sum();
    let s = &plan.scenario;
    let mut report = RunReport::new(plan_hash(plan));
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
    let mut by_step: BTreeMap<u64, BTreeMap<u32, &Vec<PlanOp>>> = BTreeMap::new();
    for st in &plan.steps {
        by_step.entry(st.step).or_default().insert(st.rank, &st.ops);
    }
    let mut clock = 0u64;
    for (&step, ranks) in &by_step {
        let mut step_tokens = 0u64;
        for rank in 0..s.dp_ranks {
            let e = &mut engines[rank as usize];
            e.begin_step();
            let mut fault_events = Vec::new();
            apply_faults(plan, step, e, &mut fault_events);
            if opts.trace {
                for f in fault_events {
                    report.trace.push(TraceEvent::fault(clock, step, rank, f));
                }
            }
            let Some(ops) = ranks.get(&rank) else { continue };
            for (i, op) in ops.iter().enumerate() {
                if let PlanOp::Forward { batch } = op {
                    step_tokens += batch.iter().map(|b| b.tokens).sum::<u64>();
                }
                let op_json = || serde_json::to_value(op).expect("ops serialize");
                report.ops += 1;
                match e.apply(op) {
                    Err(m) => {
                        if opts.trace {
                            report.trace.push(TraceEvent::op(
                                clock,
                                step,
                                rank,
                                i,
                                &op_json(),
                                format!("MISMATCH: {}", m.0),
                            ));
                        }
                        report.outcome = Outcome::Mismatch(Finding::at(step, rank, Some(i), op_json(), m.0));
                        report.finish(clock, step);
                        *engines_out = engines;
                        return report;
                    }
                    Ok(out) => {
                        if opts.trace {
                            report
                                .trace
                                .push(TraceEvent::op(clock, step, rank, i, &op_json(), out.result));
                        }
                        let mut v: Vec<Violation> = out.violations;
                        // Model invariants are functions of the pool and the tables; ops
                        // that cannot change either keep the previous (passing) result.
                        if touches_pool(op) {
                            v.extend(check_model(&e.kv, &e.retained()));
                        }
                        if let Some(first) = v.into_iter().next() {
                            let f = Finding::at(step, rank, Some(i), op_json(), first.detail)
                                .with_invariant(first.id)
                                .with_state(report::state_excerpt(e));
                            report.outcome = Outcome::Violation(f);
                            report.finish(clock, step);
                            *engines_out = engines;
                            return report;
                        }
                    }
                }
            }
        }
        let injected: Vec<Option<u64>> = engines.iter().map(|e| e.injected).collect();
        if let Some(v) = check_lockstep(step, &injected) {
            report.outcome = Outcome::Violation(Finding::at(step, 0, None, json!(null), v.detail).with_invariant(v.id));
            report.finish(clock, step);
            *engines_out = engines;
            return report;
        }
        *disagreed |= engines
            .windows(2)
            .any(|w| local_decisions(&w[0]) != local_decisions(&w[1]));
        clock += nominal_step_ns(step_tokens);
        report.steps += 1;
        progress(report.ops, total_ops);
    }
    let last = by_step.keys().next_back().copied().unwrap_or(0);
    report.finish(clock, last);
    *engines_out = engines;
    report
}
