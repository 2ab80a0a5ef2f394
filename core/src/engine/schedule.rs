//! Admission and scheduling: `allocate_slots` re-derived from the model and compared with
//! what the plan recorded (hits, tables, refusals), with the facts the admission, fence and
//! deadline checks judge.

use super::apply::OpOutcome;
use super::{Engine, Mismatch};
use crate::invariants::planner::PlannerEvent;
use crate::kv::{AllocateArgs, RequestStatus};
use crate::plan::Expect;

impl Engine {
    pub(super) fn cache_blocks(&mut self, req: &str, num_tokens: u64) -> Result<OpOutcome, Mismatch> {
        let r = self.req(req)?;
        if num_tokens > r.req.num_computed_tokens {
            return Err(Mismatch(format!(
                "cache_blocks of {num_tokens} tokens but {req} computed {}",
                r.req.num_computed_tokens
            )));
        }
        let request = r.req.clone();
        self.kv
            .cache_blocks(&request, num_tokens)
            .map_err(|e| Mismatch(e.to_string()))?;
        Ok(OpOutcome::ok("cached"))
    }

    pub(super) fn fence_check(&self, what: &str, drawn: usize, out: &mut OpOutcome) {
        out.check(PlannerEvent::PoolDraw {
            what,
            drawn,
            fenced: self.deferred.len(),
        });
    }

    pub(super) fn schedule(
        &mut self,
        id: &str,
        n: u64,
        use_cache: bool,
        fsmf: bool,
        delay: bool,
        expect: &Expect,
    ) -> Result<OpOutcome, Mismatch> {
        let r = self.req(id)?;
        let admitting = r.req.status != RequestStatus::Running;
        // A stage build (a chain rung or a native exact-context prefill: a request
        // prefilling its own prompt, neither a shadow, nor on synthetic KV, nor
        // admitted by a point's injection) neither
        // starts nor continues after the soft deadline (§1.12, §3.3 step 4; §8.2 bug 5).
        let stage_after_deadline = self.deadline_passed
            && !r.point_request
            && r.shadow_of.is_none()
            && r.synthetic_upto == 0
            && r.req.num_computed_tokens < r.req.num_prompt_tokens;
        let hits =
            (admitting && use_cache && r.req.num_computed_tokens == 0).then(|| self.kv.get_computed_blocks(&r.req));
        let hit_tokens = hits.as_ref().map_or(0, |h| h.num_computed_tokens);
        let reasked = hits.as_ref().is_some_and(|h| h.fixed_point_reasked);
        let mut out = OpOutcome::default();
        let poached = out.check(PlannerEvent::PrefixHit {
            req: id,
            hit_tokens,
            expects_hit: expect.hit_tokens.is_some(),
        });
        if poached && !self.admit_poached_hits {
            out.result = "poached".into();
            return Ok(out);
        }
        // Admitted with a poached hit (or after one): only what is left is computed (poach.rs).
        let planned = n;
        let n = self.poached_schedule(id, n, if poached { hit_tokens } else { 0 })?;
        if n == 0 && planned > 0 {
            out.result = format!("nothing left after a poached hit: computes 0 of {planned} planned tokens");
            return Ok(out);
        }
        let r = self.req(id)?;
        if r.req.num_computed_tokens.saturating_add(hit_tokens).saturating_add(n)
            > r.req.num_tokens() + r.req.num_output_placeholders
        {
            return Err(Mismatch(format!(
                "{id}: scheduling {n} tokens beyond the known sequence"
            )));
        }
        let request = r.req.clone();
        if reasked {
            self.event("hybrid-fixed-point");
        }
        let free_before = self.kv.pool.num_free_blocks();
        let args = AllocateArgs {
            num_new_tokens: n,
            hits: hits.as_ref(),
            num_lookahead_tokens: 0,
            delay_cache_blocks: delay,
            full_sequence_must_fit: fsmf,
            reserved_blocks: 0,
        };
        let got = self
            .kv
            .allocate_slots(&request, args)
            .map_err(|e| Mismatch(e.to_string()))?;
        if got.is_some() {
            self.shape_check(&request, hit_tokens, id, &mut out);
        }
        out.check(PlannerEvent::StageScheduled {
            req: id,
            tokens: n,
            admitting,
            after_deadline: stage_after_deadline,
        });
        match (got, expect.refused) {
            (None, true) => {
                out.result = "refused".into();
                return Ok(out);
            }
            (None, false) => {
                out.check(PlannerEvent::AllocationRefused {
                    req: id,
                    tokens: n,
                    free: self.kv.pool.num_free_blocks(),
                });
                out.result = "refused (unplanned)".into();
                return Ok(out);
            }
            (Some(_), true) => {
                return Err(Mismatch(format!(
                    "{id}: allocation succeeded; the plan expected a refusal"
                )))
            }
            (Some(_), false) => {}
        }
        let drawn = free_before.saturating_sub(self.kv.pool.num_free_blocks());
        self.fence_check(&format!("allocation for {id}"), drawn, &mut out);
        if let Some(h) = expect.hit_tokens {
            if h != hit_tokens {
                return Err(Mismatch(format!(
                    "{id}: prefix hit of {hit_tokens} tokens; the plan expected {h}"
                )));
            }
        }
        let r = self.requests.get_mut(id).expect("checked");
        r.req.num_computed_tokens += hit_tokens;
        r.hit_tokens += hit_tokens;
        if poached {
            r.poached_tokens += hit_tokens;
        }
        r.req.status = RequestStatus::Running;
        let tables = self.kv.get_block_ids(r.req.id);
        if let Some(t) = &expect.tables {
            if *t != tables {
                return Err(Mismatch(format!(
                    "{id}: block tables {tables:?}; the plan recorded {t:?}"
                )));
            }
        }
        out.result = if poached {
            format!("poached hit {hit_tokens} admitted as vLLM would: computes {n} of {planned} planned tokens, tables {tables:?}")
        } else {
            format!("hit {hit_tokens} tables {tables:?}")
        };
        if admitting {
            self.slots_check(&mut out);
        }
        Ok(out)
    }

    /// KV-TABLE-SHAPE: the tables right after a successful `allocate_slots`, which freed what
    /// left each window below the processed tokens (computed and hit, less those in flight).
    fn shape_check(&self, request: &crate::kv::Request, hit_tokens: u64, id: &str, out: &mut OpOutcome) {
        let processed = (request.num_computed_tokens + hit_tokens)
            .min(self.kv.config.max_model_len)
            .saturating_sub(request.num_in_flight_tokens);
        let tables = self.kv.get_block_ids(request.id);
        let groups: Vec<_> = self
            .kv
            .config
            .groups
            .iter()
            .zip(&tables)
            .map(|(g, t)| (g.kind, g.block_size, t.as_slice()))
            .collect();
        out.check(PlannerEvent::TablesShaped {
            req: id,
            processed,
            groups: &groups,
        });
    }

    /// PL-SLOTS: running requests (shadows and parked chains included) fit the
    /// scheduler's `max_num_seqs` request slots (§3.1 step 4; §8.2 bug 25).
    pub(super) fn slots_check(&self, out: &mut OpOutcome) {
        let running = self
            .requests
            .values()
            .filter(|r| r.req.status == RequestStatus::Running)
            .count();
        let slots = self.scenario.scheduler.max_num_seqs as usize;
        out.check(PlannerEvent::Running { running, slots });
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::Engine;
    use crate::plan::{BatchEntry, PlanOp, Scenario, Tokens};

    fn engine() -> Engine {
        let s: Scenario = serde_json::from_value(serde_json::json!({
            "name": "t", "model": {"groups": [{"kind": "full_attention", "block_size": 4, "layers": 1, "kv_heads": 1, "head_dim": 8}], "vocab_size": 50},
            "pool_blocks": 16, "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 32, "max_model_len": 32, "enable_caching": true},
            "seed": 0
        }))
        .unwrap();
        let mut e = Engine::new(&s, 0).unwrap();
        e.begin_step();
        e
    }

    fn add(e: &mut Engine, req: &str) {
        let prompt = Tokens::Ids { ids: (1..=9).collect() };
        e.apply(&PlanOp::AddRequest {
            req: req.into(),
            prompt,
            cache_salt: None,
        })
        .unwrap();
    }

    fn schedule(e: &mut Engine, req: &str, n: u64, use_cache: bool, delay: bool) -> super::OpOutcome {
        e.apply(&PlanOp::Schedule {
            req: req.into(),
            num_new_tokens: n,
            use_prefix_cache: use_cache,
            full_sequence_must_fit: false,
            delay_cache_blocks: delay,
            expect: Default::default(),
        })
        .unwrap()
    }

    fn forward(e: &mut Engine, req: &str, tokens: u64) {
        let batch = vec![BatchEntry {
            req: req.into(),
            tokens,
            output: vec![],
        }];
        e.apply(&PlanOp::Forward { batch }).unwrap();
    }

    #[test]
    fn cache_blocks_registers_computed_blocks_and_refuses_uncomputed_ones() {
        let mut e = engine();
        add(&mut e, "a");
        schedule(&mut e, "a", 8, true, true);
        let cache = |n| PlanOp::CacheBlocks {
            req: "a".into(),
            num_tokens: n,
        };
        assert!(e.apply(&cache(8)).is_err(), "a has computed nothing yet");
        forward(&mut e, "a", 8);
        assert_eq!(e.kv.pool.num_cached_keys(), 0, "registration was delayed");
        assert_eq!(e.apply(&cache(8)).unwrap().result, "cached");
        assert_eq!(e.kv.pool.num_cached_keys(), 2);
    }

    #[test]
    fn a_request_that_skips_the_prefix_cache_gets_no_hit() {
        let mut e = engine();
        add(&mut e, "a");
        schedule(&mut e, "a", 8, true, false);
        forward(&mut e, "a", 8);
        add(&mut e, "b");
        let out = schedule(&mut e, "b", 9, false, false);
        assert!(out.violations.is_empty(), "{:?}", out.violations);
        assert_eq!(e.req("b").unwrap().req.num_computed_tokens, 0, "no cached tokens taken");
        // The same prompt through the cache hits a's two full blocks (unexpected: poached).
        add(&mut e, "c");
        assert_eq!(schedule(&mut e, "c", 1, true, false).result, "poached");
    }
}
