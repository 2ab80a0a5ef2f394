//! The one loop that steps a plan: step by step, every rank in rank order, the rank's scheduler
//! step begins, the plan's faults due then take effect, and the rank's ops apply one by one.
//! Executors differ only in what they watch: the simulator checks and traces, the device
//! lowering emits GPU ops (and, through it, the cost model prices them). The planners' online
//! engines, whose ops do not exist before they run, start their steps with [`begin_rank_step`]
//! so that their engines see the faults exactly as an executor replaying the plan will.

use std::collections::BTreeMap;

use crate::engine::{Engine, Mismatch, OpOutcome};
use crate::plan::{FaultSpec, Plan, PlanOp};

/// Where an op sits in a plan: its step, its rank and its index in the rank's op list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OpAt {
    /// Plan step.
    pub step: u64,
    /// Rank.
    pub rank: u32,
    /// Index of the op in the rank's step.
    pub index: usize,
}

/// Whether the run goes on after an op or a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Go on.
    Continue,
    /// Stop the run here.
    Stop,
}

/// How a driven run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driven {
    /// Every step ran; the last step number (0 for a plan without steps).
    Finished {
        /// The last step run.
        last_step: u64,
    },
    /// An observer stopped the run in this step.
    Stopped {
        /// The step the observer stopped in.
        step: u64,
    },
}

/// What an executor does around each op and step. Only `after_op` is required.
pub trait Observer {
    /// A fault took effect on `rank` at the start of `step`; `event` is its trace line.
    fn fault(&mut self, _step: u64, _rank: u32, _event: String) {}
    /// Just before `op` applies: `e` is the rank's state the op starts from.
    fn before_op(&mut self, _at: OpAt, _e: &Engine, _op: &PlanOp) {}
    /// `op` applied on `e` with `outcome`.
    fn after_op(&mut self, at: OpAt, e: &Engine, op: &PlanOp, outcome: Result<OpOutcome, Mismatch>) -> Flow;
    /// Every rank finished `step`.
    fn end_step(&mut self, _step: u64, _engines: &[Engine]) -> Flow {
        Flow::Continue
    }
}

/// Starts `step` on one rank's engine: the scheduler step begins, then every fault due at
/// (`step`, this rank) takes effect (spec/plan.md §4). Returns the faults' trace events.
pub fn begin_rank_step(e: &mut Engine, faults: &[FaultSpec], step: u64) -> Vec<String> {
    e.begin_step();
    faults.iter().filter_map(|f| e.apply_fault(f, step)).collect()
}

/// The plan's ops by step number, then by rank (ordered: plans may list steps in any order).
pub fn ops_by_step(plan: &Plan) -> BTreeMap<u64, BTreeMap<u32, &[PlanOp]>> {
    let mut by_step: BTreeMap<u64, BTreeMap<u32, &[PlanOp]>> = BTreeMap::new();
    for st in &plan.steps {
        by_step.entry(st.step).or_default().insert(st.rank, &st.ops);
    }
    by_step
}

/// Runs `plan` (already validated) on `engines`, one per rank, in lock-step. A rank without
/// ops in a step still begins it and takes its faults.
pub fn drive(plan: &Plan, engines: &mut [Engine], obs: &mut dyn Observer) -> Driven {
    let by_step = ops_by_step(plan);
    for (&step, ranks) in &by_step {
        for (rank, e) in engines.iter_mut().enumerate() {
            let rank = rank as u32;
            for event in begin_rank_step(e, &plan.faults, step) {
                obs.fault(step, rank, event);
            }
            let Some(ops) = ranks.get(&rank) else { continue };
            for (index, op) in ops.iter().enumerate() {
                let at = OpAt { step, rank, index };
                obs.before_op(at, e, op);
                let outcome = e.apply(op);
                if obs.after_op(at, e, op, outcome) == Flow::Stop {
                    return Driven::Stopped { step };
                }
            }
        }
        if obs.end_step(step, engines) == Flow::Stop {
            return Driven::Stopped { step };
        }
    }
    Driven::Finished {
        last_step: by_step.keys().next_back().copied().unwrap_or(0),
    }
}
