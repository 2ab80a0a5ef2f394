//! A request's end and the sweep's: `finish_requests` as vLLM's scheduler implements it
//! (vllm_kv.md §6.7: ids that are unknown or already finished are silently ignored; live ones
//! are retired, through the deferred-free fence when `fenced`), outputs landing and fenced
//! frees released, and what the sweep must leave behind.

use super::apply::OpOutcome;
use super::{Deferred, Engine, Mismatch};
use crate::bugs::BugMutant;
use crate::invariants::planner::PlannerEvent;
use crate::kv::RequestStatus;
use crate::plan::PlanOp;
use crate::slips::SlipMutant;

impl Engine {
    /// Retire every live id in `ids`, in order; returns the ids actually finished.
    pub fn finish_requests(&mut self, ids: &[&str], fenced: bool) -> Vec<String> {
        let mut done = Vec::new();
        for id in ids {
            if self.requests.contains_key(*id)
                && self
                    .apply(&PlanOp::Finish {
                        req: (*id).to_string(),
                        fenced,
                    })
                    .is_ok()
            {
                done.push((*id).to_string());
            }
        }
        done
    }

    pub(super) fn process_outputs(&mut self, lag: u64) -> OpOutcome {
        let now = self.step_seq;
        // One output queue, processed in step order: a late step's outputs hold back
        // every later step's (a request's tokens are appended in the order it sampled them).
        let ready = self
            .pending_outputs
            .iter()
            .take_while(|p| p.land_seq <= now && p.step_seq + lag <= now)
            .count();
        let landing: Vec<_> = self.pending_outputs.drain(..ready).collect();
        for p in landing {
            if let Some(r) = self.requests.get_mut(&p.req) {
                r.req.num_output_placeholders -= p.tokens.len() as u64;
                r.req.num_in_flight_tokens -= p.scheduled;
                r.req.append_output(&p.tokens);
            }
        }
        // Processed up to the step before the oldest output still in flight.
        self.processed_seq = self.pending_outputs.iter().map(|p| p.step_seq - 1).min().unwrap_or(now);
        let processed = self.processed_seq;
        // Issue 19's slip: the fence drains one step early.
        let drain_to = processed + u64::from(self.slip(SlipMutant::FenceReleasedEarly));
        let (release, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.deferred)
            .into_iter()
            .partition(|d| d.step_seq <= drain_to);
        self.deferred = keep;
        let mut out = OpOutcome::ok(format!("processed to {processed}, released {}", release.len()));
        let oldest_in_flight = self.pending_outputs.iter().map(|p| p.step_seq).min();
        for d in &release {
            out.check(PlannerEvent::FencedFreeReleased {
                req: &d.req,
                step: d.step_seq,
                oldest_in_flight,
            });
            self.kv.free_detached(&d.blocks);
            self.free_order_check(&d.req, std::slice::from_ref(&d.blocks), true, &mut out);
        }
        out
    }

    pub(super) fn finish(&mut self, id: &str, fenced: bool) -> Result<OpOutcome, Mismatch> {
        let rid = self.req(id)?.req.id;
        let in_flight = (self.in_forward.contains(id) && self.processed_seq < self.step_seq)
            || self.pending_outputs.iter().any(|p| p.req == id);
        // §8.2 bug 13: outputs built by the benchmark skipped `sched_step_seq += 1`, so
        // the request compares as processed and is freed at once.
        let fenced = fenced && !self.bug(BugMutant::FenceBypass);
        let mut out = OpOutcome::ok(if fenced { "finished (fenced)" } else { "finished" });
        out.check(PlannerEvent::Freed {
            req: id,
            in_flight,
            fenced,
        });
        if fenced {
            let blocks = self.kv.pop_blocks_for_free(rid);
            self.deferred.push(Deferred {
                step_seq: self.step_seq,
                req: id.to_string(),
                blocks,
            });
        } else {
            let tables = self.kv.get_block_ids(rid);
            self.kv.free(rid);
            self.free_order_check(id, &tables, false, &mut out);
        }
        self.requests.remove(id);
        Ok(out)
    }

    pub(super) fn shed(&mut self, req: &str, fenced: bool) -> Result<OpOutcome, Mismatch> {
        self.event("shed");
        let building = self
            .requests
            .get(req)
            .is_some_and(|r| r.req.num_computed_tokens < r.req.num_prompt_tokens);
        if self.deadline_passed && building {
            // A soft timeout landed while the request was still being prefilled.
            self.event("shed-mid-build");
        }
        let out = self.finish(req, fenced)?;
        self.shed.insert(req.to_string());
        Ok(out)
    }

    pub(super) fn preempt(&mut self, req: &str) -> Result<OpOutcome, Mismatch> {
        let rid = self.req(req)?.req.id;
        let tables = self.kv.get_block_ids(rid);
        self.kv.free(rid);
        let mut out = OpOutcome::ok("preempted");
        self.free_order_check(req, &tables, false, &mut out);
        let r = self.requests.get_mut(req).expect("checked");
        r.req.num_computed_tokens = 0;
        r.req.status = RequestStatus::Preempted;
        Ok(out)
    }

    /// KV-FREE-ORDER: where `tables` (freed by one call, or one call per group) went in the
    /// free queue.
    fn free_order_check(&self, req: &str, tables: &[Vec<u32>], one_call: bool, out: &mut OpOutcome) {
        let pool = &self.kv.pool;
        let mut queued: Vec<(u32, bool)> = tables
            .iter()
            .flatten()
            .filter(|&&b| b != crate::kv::NULL_BLOCK && pool.ref_cnt(b) == 0)
            .map(|&b| (b, pool.enable_caching() && pool.block_hash(b).is_some()))
            .collect();
        queued.sort_unstable();
        let to_back = queued.iter().filter(|q| q.1).count();
        let queue_front: Vec<u32> = pool.free_queue().take(queued.len() - to_back).collect();
        let queue_back: Vec<u32> = pool.free_queue_back().take(to_back).collect();
        out.check(PlannerEvent::RequestFreed {
            req,
            tables,
            one_call,
            queued: &queued,
            queue_front: &queue_front,
            queue_back: &queue_back,
        });
    }

    pub(super) fn reset_prefix_cache(&mut self, expect: Option<bool>) -> Result<OpOutcome, Mismatch> {
        let mut out = OpOutcome::default();
        out.check(PlannerEvent::PrefixReset {
            fenced: self.deferred.len(),
        });
        // DECISION: blocks a `shrink_pool` fault took away model a smaller
        // pool, which vLLM's reset would not see: they are handed back for
        // the reset and the same number taken away again after it.
        let phantom = std::mem::take(&mut self.phantom);
        let n = phantom.len();
        self.kv.pool.free_blocks(phantom);
        let held_before = (1..self.kv.pool.num_blocks())
            .filter(|&b| self.kv.pool.ref_cnt(b) > 0)
            .count();
        let done = self.kv.reset_prefix_cache();
        out.check(PlannerEvent::PrefixCacheReset {
            done,
            held_before,
            keys_after: self.kv.pool.num_cached_keys(),
        });
        if let Ok(b) = self.kv.pool.get_new_blocks(n) {
            self.phantom = b;
        }
        if expect.is_some_and(|e| e != done) {
            return Err(Mismatch(format!(
                "reset_prefix_cache returned {done}, the plan saw {expect:?}"
            )));
        }
        out.result = format!("reset {done}");
        Ok(out)
    }

    pub(super) fn end_sweep(&mut self) -> OpOutcome {
        let mut out = OpOutcome::ok("end of sweep");
        // Every point timed on its admission step must be timed on a steady step after it.
        // A point whose injection fell short is skipped untimed (`decode_injection_failed`).
        let admission_only = self
            .points
            .iter()
            .find(|(_, (_, admitted, steady))| *admitted && *steady == 0)
            .map(|(point, _)| *point);
        out.check(PlannerEvent::SweepEnded { admission_only });
        self.clean_end_check("after the sweep", &mut out);
        out
    }

    /// PL-CLEAN-END: nothing the sweep used stays referenced or cached
    /// (blocks a `shrink_pool` fault took away are not the sweep's).
    pub(super) fn clean_end_check(&self, when: &str, out: &mut OpOutcome) {
        let held: Vec<u32> = (1..self.kv.pool.num_blocks())
            .filter(|&b| self.kv.pool.ref_cnt(b) > 0 && !self.phantom.contains(&b))
            .collect();
        out.check(PlannerEvent::Leftovers {
            when,
            held: &held,
            cached_keys: self.kv.pool.num_cached_keys(),
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::Engine;
    use crate::invariants::InvariantId;
    use crate::plan::{BatchEntry, PlanOp, Scenario, Tokens};

    fn scenario_caching(enable_caching: bool) -> Scenario {
        serde_json::from_value(serde_json::json!({
            "name": "t", "model": {"groups": [{"kind": "full_attention", "block_size": 4, "layers": 1, "kv_heads": 1, "head_dim": 8}], "vocab_size": 50},
            "pool_blocks": 16, "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 32, "max_model_len": 32, "enable_caching": enable_caching},
            "seed": 0
        }))
        .unwrap()
    }

    fn scenario() -> Scenario {
        scenario_caching(true)
    }

    /// Adds and schedules `req` with a five-token prompt.
    fn admit(e: &mut Engine, req: &str) {
        let add = PlanOp::AddRequest {
            req: req.into(),
            prompt: Tokens::Ids {
                ids: vec![1, 2, 3, 4, 5],
            },
            cache_salt: None,
        };
        e.apply(&add).unwrap();
        let sched = PlanOp::Schedule {
            req: req.into(),
            num_new_tokens: 5,
            use_prefix_cache: true,
            full_sequence_must_fit: false,
            delay_cache_blocks: false,
            expect: Default::default(),
        };
        e.apply(&sched).unwrap();
    }

    fn ids(o: &super::OpOutcome) -> Vec<InvariantId> {
        o.violations.iter().map(|v| v.id).collect()
    }

    #[test]
    fn an_unfenced_free_of_a_request_in_an_unprocessed_forward_is_in_flight() {
        // A prefill chunk samples nothing, so no output is pending: the forward itself,
        // not yet processed, makes the free one of blocks being written.
        let mut e = Engine::new(&scenario(), 0).unwrap();
        e.begin_step();
        admit(&mut e, "a");
        let fwd = PlanOp::Forward {
            batch: vec![BatchEntry {
                req: "a".into(),
                tokens: 5,
                output: vec![],
            }],
        };
        e.apply(&fwd).unwrap();
        let out = e.apply(&PlanOp::Finish {
            req: "a".into(),
            fenced: false,
        });
        assert_eq!(ids(&out.unwrap()), [InvariantId::PlInflightFree]);
    }

    #[test]
    fn a_delayed_steps_outputs_are_not_overtaken_by_a_later_steps() {
        let forward = |output: u64, tokens: u64| PlanOp::Forward {
            batch: vec![BatchEntry {
                req: "a".into(),
                tokens,
                output: vec![output],
            }],
        };
        let mut e = Engine::new(&scenario(), 0).unwrap();
        e.begin_step();
        admit(&mut e, "a");
        e.output_delay = 2; // what a `delay_outputs` fault sets at this step
        e.apply(&forward(7, 5)).unwrap();
        e.apply(&PlanOp::ProcessOutputs { lag: 0 }).unwrap();
        e.begin_step();
        e.apply(&forward(8, 1)).unwrap();
        e.apply(&PlanOp::ProcessOutputs { lag: 0 }).unwrap();
        let a = |e: &Engine| e.requests["a"].req.tokens.clone();
        assert_eq!(a(&e), [1, 2, 3, 4, 5], "step 2's output waits behind step 1's");
        e.begin_step();
        e.apply(&PlanOp::ProcessOutputs { lag: 0 }).unwrap();
        assert_eq!(a(&e), [1, 2, 3, 4, 5, 7, 8], "appended in the order they were sampled");
    }

    #[test]
    fn blocks_still_held_at_the_end_fail_the_clean_end_without_cached_keys() {
        let mut e = Engine::new(&scenario_caching(false), 0).unwrap();
        e.begin_step();
        admit(&mut e, "a");
        assert_eq!(e.kv.pool.num_cached_keys(), 0);
        let out = e.apply(&PlanOp::EndSweep).unwrap();
        assert_eq!(ids(&out), [InvariantId::PlCleanEnd], "{:?}", out.violations);
        // Used blocks as a share of the 15 usable: 2 (five tokens in blocks of 4).
        assert!((e.kv.usage() - 2.0 / 15.0).abs() < 1e-12, "{}", e.kv.usage());
    }

    #[test]
    fn unknown_and_finished_ids_are_ignored_and_fenced_frees_wait() {
        let mut e = Engine::new(&scenario(), 0).unwrap();
        e.begin_step();
        admit(&mut e, "a");
        let free_before = e.kv.pool.num_free_blocks();
        assert_eq!(e.finish_requests(&["ghost", "a", "a"], true), ["a"]);
        assert_eq!(e.kv.pool.num_free_blocks(), free_before, "fenced: held until processed");
        assert_eq!(e.retained().len(), 2);
        e.apply(&PlanOp::ProcessOutputs { lag: 0 }).unwrap();
        assert_eq!(e.kv.pool.num_free_blocks(), free_before + 2);
        assert!(e.finish_requests(&["a"], false).is_empty(), "a finished id is ignored");
    }
}
