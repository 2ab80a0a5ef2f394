//! Faults applied to one rank's engine at the start of a step (spec/plan.md §4).
//! Shared by the simulator executor and the chain planner, which drives its own
//! engines and must see the same local failures the executor will replay.

use super::Engine;
use crate::plan::FaultSpec;

impl Engine {
    /// Apply `f` if it fires at (`step`, this rank); returns the trace event.
    pub fn apply_fault(&mut self, f: &FaultSpec, step: u64) -> Option<String> {
        let rank = self.rank;
        match f {
            FaultSpec::SoftTimeout { step: s } if *s == step => {
                self.deadline_passed = true;
                Some(format!("soft timeout at step {step}"))
            }
            // finish_requests(ABORTED): an unknown or finished id is ignored.
            FaultSpec::Abort {
                step: s,
                rank: r,
                req,
                fenced,
            } if *s == step && *r == rank => {
                (!self.finish_requests(&[req.as_str()], *fenced).is_empty()).then(|| format!("abort {req}"))
            }
            FaultSpec::ShrinkPool {
                step: s,
                rank: r,
                blocks,
                ..
            } if *s == step && *r == rank => {
                let n = (*blocks as usize).min(self.kv.pool.num_free_blocks());
                if let Ok(b) = self.kv.pool.get_new_blocks(n) {
                    self.phantom.extend(b);
                }
                Some(format!("pool shrunk by {n} blocks"))
            }
            // A transient shrink ends: the blocks go back to the free queue in
            // the order they were taken (DECISION: every block the pool lost, as
            // the prefix-cache reset hands them all back too).
            FaultSpec::ShrinkPool {
                step: s,
                rank: r,
                steps: Some(k),
                ..
            } if s + k == step && *r == rank => {
                let back = std::mem::take(&mut self.phantom);
                let n = back.len();
                self.kv.pool.free_blocks(back);
                Some(format!("pool restored by {n} blocks"))
            }
            FaultSpec::DelayOutputs { step: s, rank: r, by } if *s == step && *r == rank => {
                self.output_delay = *by;
                Some(format!("outputs delayed by {by} steps"))
            }
            FaultSpec::StageFailure {
                step: s,
                rank: r,
                after,
            } if *s == step && *r == rank => {
                self.fail_registration_after = Some(*after);
                Some("stage failure armed".into())
            }
            FaultSpec::MessageLag { rank: r, steps } if *r == rank && self.message_lag != *steps => {
                self.message_lag = *steps;
                self.group_lag = self.group_lag.max(*steps);
                Some(format!("messages delayed by {steps} steps"))
            }
            // Every rank learns a peer's lag: the blocking exchange waits for it.
            FaultSpec::MessageLag { steps, .. } if self.group_lag < *steps => {
                self.group_lag = *steps;
                None
            }
            _ => None,
        }
    }
}
