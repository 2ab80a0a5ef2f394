//! A prefix hit the plan did not expect (PL-NO-POACH), run as vLLM would run it after the
//! finding ([`Engine::admit_poached_hits`], off by default).
//!
//! vLLM's scheduler admits a waiting request with whatever `get_computed_blocks` finds: the hit
//! blocks join its table (their ref count +1, `allocate_slots` with the hit), its
//! `num_computed_tokens` becomes the hit, and it schedules only the uncached rest,
//! `n = min(num_tokens − num_computed_tokens, token budget)`; a running request's later chunks
//! are cut the same way (vllm_kv.md §6.4, the running loop and waiting-loop steps 5–7). A
//! plan's token counts were chosen without the hit, so every later `schedule` and `forward` of
//! a poaching request is cut to what is left to compute: `min(planned, left)` is exactly vLLM's
//! choice whenever the plan's count was `min(left without the hit, budget)` under the same
//! budget (the budget other requests of the step would gain is not redistributed). A planned
//! chunk the hit leaves nothing to compute computes nothing (its sampled token, if the plan has
//! one there, is still taken): vLLM would have ended that prefill a step earlier and given the
//! budget to others, which would need another step structure than the plan's. Reads of the hit
//! part read the shared cached blocks, which hold the KV of the same tokens (the hit is found
//! by the hash of the tokens and the salt).

use super::{Engine, EngineReq, Mismatch};
use crate::plan::BatchEntry;

/// Tokens of `r` known and not computed yet (sampled tokens in flight included).
fn left(r: &EngineReq) -> u64 {
    (r.req.num_tokens() + r.req.num_output_placeholders).saturating_sub(r.req.num_computed_tokens)
}

impl Engine {
    /// New tokens a `schedule` of `planned` ones computes for `id`, when it takes a poached
    /// hit of `hit` tokens now (admission) or took one before: cut to what is left after the
    /// hit (0: nothing left). `planned` for every other request.
    pub(super) fn poached_schedule(&self, id: &str, planned: u64, hit: u64) -> Result<u64, Mismatch> {
        let r = self.req(id)?;
        if r.poached_tokens + hit == 0 {
            return Ok(planned);
        }
        Ok(planned.min(left(r).saturating_sub(hit)))
    }

    /// Tokens a forward (or synthetic KV) entry computes: the planned count, cut to what is
    /// left for a request admitted with a poached hit. The GPU lowering reads the same count.
    pub fn forward_tokens(&self, entry: &BatchEntry) -> u64 {
        match self.requests.get(&entry.req) {
            Some(r) if r.poached_tokens > 0 => entry.tokens.min(left(r)),
            _ => entry.tokens,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::engine::Engine;
    use crate::plan::{BatchEntry, PlanOp, Scenario, Tokens};

    fn engine(admit: bool) -> Engine {
        let s: Scenario = serde_json::from_value(serde_json::json!({
            "name": "t", "model": {"groups": [{"kind": "full_attention", "block_size": 4, "layers": 1, "kv_heads": 1, "head_dim": 8}], "vocab_size": 50},
            "pool_blocks": 16, "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 8, "max_model_len": 32, "enable_caching": true},
            "seed": 0
        }))
        .unwrap();
        let mut e = Engine::new(&s, 0).unwrap();
        e.admit_poached_hits = admit;
        e.begin_step();
        e
    }

    fn op(e: &mut Engine, op: PlanOp) -> Result<super::super::OpOutcome, super::Mismatch> {
        e.apply(&op)
    }

    fn add(req: &str) -> PlanOp {
        add_len(req, 13)
    }

    fn add_len(req: &str, len: u64) -> PlanOp {
        PlanOp::AddRequest {
            req: req.into(),
            prompt: Tokens::Ids {
                ids: (1..=len).collect(),
            },
            cache_salt: None,
        }
    }

    fn schedule(req: &str, n: u64) -> PlanOp {
        PlanOp::Schedule {
            req: req.into(),
            num_new_tokens: n,
            use_prefix_cache: true,
            full_sequence_must_fit: false,
            delay_cache_blocks: false,
            expect: Default::default(),
        }
    }

    fn forward(req: &str, tokens: u64, output: Vec<u64>) -> PlanOp {
        PlanOp::Forward {
            batch: vec![BatchEntry {
                req: req.into(),
                tokens,
                output,
            }],
        }
    }

    /// `a` prefills its 13 tokens in chunks of 8 and 5; `b`, the same prompt, is planned the
    /// same way without expecting the hit on a's 3 full blocks (12 tokens).
    fn poach(e: &mut Engine) -> Vec<Result<super::super::OpOutcome, super::Mismatch>> {
        for o in [
            add("a"),
            schedule("a", 8),
            forward("a", 8, vec![]),
            schedule("a", 5),
            forward("a", 5, vec![7]),
        ] {
            op(e, o).unwrap();
        }
        e.begin_step();
        [add("b"), schedule("b", 8), forward("b", 8, vec![])]
            .into_iter()
            .map(|o| op(e, o))
            .collect()
    }

    #[test]
    fn off_the_finding_stops_the_request() {
        let mut e = engine(false);
        let r = poach(&mut e);
        let s = r[1].as_ref().unwrap();
        assert_eq!(s.result, "poached");
        assert_eq!(s.violations[0].id.to_string(), "PL-NO-POACH");
        assert_eq!(r[2].as_ref().unwrap_err().0, "forward of b which is not scheduled");
    }

    #[test]
    fn on_the_request_computes_only_the_uncached_rest() {
        let mut e = engine(true);
        let r = poach(&mut e);
        let s = r[1].as_ref().unwrap();
        assert_eq!(s.violations[0].id.to_string(), "PL-NO-POACH", "still a finding");
        assert!(s.result.starts_with("poached hit 12 admitted"), "{}", s.result);
        r[2].as_ref().unwrap();
        let b = e.req("b").unwrap();
        assert_eq!((b.hit_tokens, b.poached_tokens), (12, 12));
        // The planned chunk of 8 computes the one uncached token.
        assert_eq!(b.req.num_computed_tokens, 13);
        let a = e.req("a").unwrap();
        let (ta, tb) = (e.kv.get_block_ids(a.req.id), e.kv.get_block_ids(b.req.id));
        assert_eq!(ta[0][..3], tb[0][..3], "the hit part is a's cached blocks");
        // The plan's second chunk (5 tokens) has nothing left to compute: it computes nothing
        // and its sampled token is taken.
        let next = op(&mut e, schedule("b", 5)).unwrap();
        assert!(next.result.starts_with("nothing left"), "{}", next.result);
        let content = e.content.clone();
        let f = op(&mut e, forward("b", 5, vec![9])).unwrap();
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert_eq!(e.content, content, "nothing written");
        let b = e.req("b").unwrap();
        assert_eq!((b.req.num_computed_tokens, b.req.num_tokens()), (13, 14));
    }

    #[test]
    fn on_a_later_chunk_is_cut_to_what_is_left() {
        let mut e = engine(true);
        // `a` caches one block (4 tokens) of the prefix `b` shares; b planned as 8 + 5.
        for o in [add_len("a", 5), schedule("a", 5), forward("a", 5, vec![7])] {
            op(&mut e, o).unwrap();
        }
        e.begin_step();
        op(&mut e, add("b")).unwrap();
        let s = op(&mut e, schedule("b", 8)).unwrap();
        assert!(s.result.contains("computes 8 of 8"), "{}", s.result);
        op(&mut e, forward("b", 8, vec![])).unwrap();
        assert_eq!(e.req("b").unwrap().req.num_computed_tokens, 12, "positions 4..12");
        e.begin_step();
        let s = op(&mut e, schedule("b", 5)).unwrap();
        assert!(s.violations.is_empty(), "{:?}", s.violations);
        let f = op(&mut e, forward("b", 5, vec![9])).unwrap();
        assert!(
            f.violations.is_empty(),
            "reads of the hit part hold a's KV: {:?}",
            f.violations
        );
        let b = e.req("b").unwrap();
        assert_eq!(
            (b.req.num_computed_tokens, b.req.num_tokens()),
            (13, 14),
            "one token, then the output"
        );
    }

    #[test]
    fn on_a_request_without_a_poached_hit_is_unchanged() {
        let (mut on, mut off) = (engine(true), engine(false));
        for e in [&mut on, &mut off] {
            for o in [add("a"), schedule("a", 8), forward("a", 8, vec![])] {
                op(e, o).unwrap();
            }
        }
        assert_eq!(
            on.forward_tokens(&BatchEntry {
                req: "a".into(),
                tokens: 9,
                output: vec![]
            }),
            9
        );
        assert_eq!(format!("{:?}", on.requests), format!("{:?}", off.requests));
        assert_eq!(on.content, off.content);
    }
}
