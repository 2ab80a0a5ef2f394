//! Ops only recorded plans carry (spec/plan.md §7): the real manager's state
//! after a step, which the engine must match exactly, and the planner's failure.

use super::{Engine, Mismatch, OpOutcome};
use crate::invariants::planner::PlannerEvent;
use crate::plan::{FailureKind, Observation};

impl Engine {
    /// The recorded manager held `obs` at the end of this step; so must the model.
    pub(super) fn observe(&mut self, obs: &Observation) -> Result<OpOutcome, Mismatch> {
        if !obs.unmodelled.is_empty() {
            return Err(Mismatch(format!(
                "the planner edited the KV cache in a way no plan op models: {}",
                obs.unmodelled.join("; ")
            )));
        }
        for (req, want) in &obs.tables {
            let Some(r) = self.requests.get(req) else {
                return Err(Mismatch(format!(
                    "the real manager holds tables for {req}, which kvsim does not know"
                )));
            };
            let have = self.kv.get_block_ids(r.req.id);
            if &have != want {
                return Err(Mismatch(format!(
                    "{req}: kvsim's block tables {have:?}; the real manager's {want:?}"
                )));
            }
        }
        for req in &obs.gone {
            if let Some(r) = self.requests.get(req) {
                if self.kv.get_block_ids(r.req.id).iter().any(|t| !t.is_empty()) {
                    return Err(Mismatch(format!(
                        "{req} released its blocks in the real manager; kvsim still holds them"
                    )));
                }
            }
        }
        let live = self
            .requests
            .values()
            .filter(|r| self.kv.get_block_ids(r.req.id).iter().any(|t| !t.is_empty()))
            .count() as u64;
        if live != obs.live {
            return Err(Mismatch(format!(
                "{live} requests hold blocks in kvsim; {} in the real manager",
                obs.live
            )));
        }
        let free = self.kv.pool.num_free_blocks() as u64;
        if free != obs.free_blocks {
            return Err(Mismatch(format!(
                "{free} free blocks in kvsim's pool; {} in the real one",
                obs.free_blocks
            )));
        }
        let head: Vec<u32> = self.kv.pool.free_queue().take(obs.free_head.len()).collect();
        if head != obs.free_head {
            return Err(Mismatch(format!(
                "kvsim's free queue starts {head:?}; the real one {:?}",
                obs.free_head
            )));
        }
        let mut out = OpOutcome::ok(format!("observed {} tables", obs.tables.len()));
        out.check(PlannerEvent::RunnerTables {
            mismatch: obs.runner_mismatch.as_deref(),
        });
        Ok(out)
    }

    /// The recorded planner raised or stalled here: a finding, with what the
    /// failure left behind.
    pub(super) fn planner_failed(&mut self, kind: FailureKind, error: &str) -> Result<OpOutcome, Mismatch> {
        let held = (1..self.kv.pool.num_blocks())
            .filter(|&b| self.kv.pool.ref_cnt(b) > 0)
            .count();
        let left = format!(
            "left behind: {held} referenced blocks, {} prefix-cache keys, {} live requests",
            self.kv.pool.num_cached_keys(),
            self.requests.len()
        );
        let what = match kind {
            FailureKind::Raised => "the planner raised",
            FailureKind::Stalled => "the sweep never ended",
            FailureKind::Fault => return self.aborted_on_fault(error),
        };
        let mut out = OpOutcome::ok(what);
        out.check(PlannerEvent::PlannerFailed {
            kind,
            what,
            error,
            left: &left,
        });
        Ok(out)
    }

    /// 1.6.1 fails a shadow registration by raising; its abort path then
    /// finishes every benchmark request and resets the prefix cache before
    /// passing the error on. On an injected failure that is the design: judged
    /// by what the abort left (PL-CLEAN-END), not as a finding itself.
    fn aborted_on_fault(&mut self, error: &str) -> Result<OpOutcome, Mismatch> {
        if !self.registration_failed_by_fault {
            return Err(Mismatch(format!(
                "the planner passed on an injected failure that no stage_failure fault caused: {error}"
            )));
        }
        let mut out = OpOutcome::ok("the planner aborted on the injected registration failure");
        self.clean_end_check("after the abort", &mut out);
        Ok(out)
    }
}
