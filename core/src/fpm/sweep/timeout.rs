//! Soft timeout (dynamo_fpm.md §1.12; §3.3 step 4; §8.1 invariant 36; §8.2 bug 5).
//!
//! The planner keeps the executor's simulated clock (`nominal_step_ns` of each
//! step's forward tokens, summed over ranks as `run_plan` does) and samples the
//! deadline where Dynamo does: before each new point once a point has finished
//! (the boundary check), and before starting or continuing a warm-up stage (a
//! chain rung, or a native point's exact-context prefill). A stage being built
//! when the deadline is seen is shed; everything measured before is kept.
//!
//! DECISION: the deadline "passes" at the first step at which the planner samples
//! it past; the planner records that step as a `soft_timeout` fault in the plan,
//! so the executor's PL-DEADLINE check proves no point was injected and no shadow
//! registered after it (Dynamo samples its clock only at these boundaries too).

use super::SweepBuilder;
use crate::fpm::scenarios::BuiltinScenario;
use crate::plan::{nominal_step_ns, FaultSpec, PlanOp};

use super::SweepOptions;

/// The soft deadline in simulated ns: the override, else `BenchSettings.timeout_seconds`.
pub(super) fn deadline_ns(s: &BuiltinScenario, opts: &SweepOptions) -> u64 {
    match opts.timeout_seconds {
        Some(t) => (t.max(0.0) * 1e9).round() as u64,
        None => s.bench.timeout_seconds.saturating_mul(1_000_000_000),
    }
}

/// The settings as the artifact's `config` shows them; an override replaces
/// `timeout_seconds` (seconds, fractional allowed).
pub(super) fn config_with_override(s: &BuiltinScenario, opts: &SweepOptions) -> serde_json::Value {
    let mut v = serde_json::to_value(&s.bench).expect("settings serialize");
    if let Some(t) = opts.timeout_seconds {
        v["timeout_seconds"] = serde_json::json!(t);
    }
    v
}

/// Shed every request of an execution whose warm-up was abandoned, and drain the fence.
pub(super) fn shed_all(batch: usize, rank: u32, req: &dyn Fn(u32, usize) -> String) -> Vec<PlanOp> {
    let mut ops: Vec<PlanOp> = (0..batch)
        .map(|slot| PlanOp::Shed {
            req: req(rank, slot),
            fenced: true,
        })
        .collect();
    ops.push(PlanOp::ProcessOutputs { lag: 0 });
    ops
}

impl SweepBuilder<'_> {
    /// Close the current step: advance the simulated clock and the step counter.
    pub(super) fn end_step(&mut self) {
        self.clock_ns += nominal_step_ns(std::mem::take(&mut self.pending_tokens));
        self.next_step += 1;
    }

    /// Sample the deadline before the next step; the first time it is seen past,
    /// the sweep stops and the step is recorded as the `soft_timeout` fault.
    pub(super) fn deadline_observed(&mut self) -> bool {
        if self.stopped {
            return true;
        }
        let passed = self.deadline_ns.is_some_and(|d| self.clock_ns >= d);
        if passed {
            self.stopped = true;
            self.timeout_step = Some(self.next_step);
            self.faults.push(FaultSpec::SoftTimeout { step: self.next_step });
            self.meta.stop_reason = Some("timeout".into());
            if let Some(engines) = &mut self.engines {
                // The planner's engines see the deadline as the executor's will.
                engines.iter_mut().for_each(|e| e.deadline_passed = true);
            }
        }
        passed
    }

    /// The boundary check before a new point (§1.12): only once a point finished.
    pub(super) fn stop_before_point(&mut self) -> bool {
        self.stopped || (self.finished_points > 0 && self.deadline_observed())
    }
}
