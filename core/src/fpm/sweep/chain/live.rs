//! The chain planner's own engines: every op is applied as it is built.

use crate::bugs::BugMutant;
use crate::engine::{Engine, Mismatch};
use crate::fpm::sweep::SweepBuilder;
use crate::plan::PlanOp;

/// Apply one op the planner built to its own engine; a refusal or a planner
/// violation means the planner is wrong (a mutated, `lenient` planner records
/// the violation's op and goes on: the executor is the judge).
pub(in crate::fpm::sweep) fn apply_checked(e: &mut Engine, op: &PlanOp, lenient: bool) -> Result<(), Mismatch> {
    let out = e.apply(op)?;
    match out.violations.first() {
        Some(v) if !lenient => Err(Mismatch(format!("{}: {}", v.id, v.detail))),
        _ => Ok(()),
    }
}

/// One rank's ops of a step, applied to the rank's engine as they are built.
pub(super) struct Live<'a> {
    pub(super) e: &'a mut Engine,
    ops: Vec<PlanOp>,
    error: Option<String>,
    lenient: bool,
}

impl Live<'_> {
    pub(super) fn op(&mut self, op: PlanOp) {
        if self.error.is_none() {
            if let Err(m) = apply_checked(self.e, &op, self.lenient) {
                self.error = Some(m.0);
            }
        }
        self.ops.push(op);
    }
}

impl SweepBuilder<'_> {
    /// A lock-step step whose ops depend on the live engine state.
    pub(super) fn step_live(&mut self, mut build: impl FnMut(u32, &mut Live<'_>)) -> u64 {
        let step = self.next_step;
        let mut engines = self.engines.take().expect("chain planning drives engines");
        let lenient = self.lenient();
        for rank in 0..self.s.scenario.dp_ranks {
            let e = &mut engines[rank as usize];
            // The executor replaying the plan starts each rank's step the same way.
            crate::driver::begin_rank_step(e, &self.faults, step);
            let mut live = Live {
                e,
                ops: Vec::new(),
                error: None,
                lenient,
            };
            build(rank, &mut live);
            if let Some(m) = live.error {
                self.error.get_or_insert(format!("step {step} rank {rank}: {m}"));
            }
            self.pending_tokens += crate::plan::forward_tokens(&live.ops);
            self.steps.push(crate::plan::Step {
                step,
                rank,
                ops: live.ops,
            });
        }
        self.engines = Some(engines);
        self.end_step();
        step
    }

    pub(super) fn engine(&self, rank: u32) -> &Engine {
        &self.engines.as_ref().expect("chain planning drives engines")[rank as usize]
    }

    /// `_bench_frees_pending()` idle steps (§3.7; §8.2 bug 14): before anything
    /// draws from the pool again, idle while any rank still owes fenced frees
    /// (outputs in flight). The mutant of bug 14 does not wait.
    pub(in crate::fpm::sweep) fn drain_fence(&mut self) {
        if self.bug(BugMutant::NoIdleBeforeDraw) {
            return;
        }
        for _ in 0..64 {
            let owed = self
                .engines
                .as_ref()
                .is_some_and(|es| es.iter().any(|e| !e.deferred.is_empty()));
            if !owed {
                return;
            }
            self.step_live(|_, live| live.op(PlanOp::ProcessOutputs { lag: 0 }));
        }
    }

    /// The smallest free pool over ranks (chain planning).
    pub(super) fn min_free(&self) -> u64 {
        self.engines.as_ref().map_or(0, |es| {
            es.iter().map(|e| e.kv.pool.num_free_blocks() as u64).min().unwrap_or(0)
        })
    }
}
