//! `finish_requests` as vLLM's scheduler implements it (vllm_kv.md §6.7): ids that
//! are unknown or already finished are silently ignored; live ones are retired
//! (through the deferred-free fence when `fenced`).

use super::Engine;
use crate::plan::PlanOp;

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
}

#[cfg(test)]
mod tests {
    use crate::engine::Engine;
    use crate::plan::{PlanOp, Scenario, Tokens};

    fn scenario() -> Scenario {
        serde_json::from_value(serde_json::json!({
            "name": "t", "model": {"groups": [{"kind": "full_attention", "block_size": 4, "layers": 1, "kv_heads": 1, "head_dim": 8}], "vocab_size": 50},
            "pool_blocks": 16, "scheduler": {"max_num_seqs": 4, "max_num_batched_tokens": 32, "max_model_len": 32, "enable_caching": true},
            "seed": 0
        }))
        .unwrap()
    }

    #[test]
    fn unknown_and_finished_ids_are_ignored_and_fenced_frees_wait() {
        let mut e = Engine::new(&scenario(), 0).unwrap();
        e.begin_step();
        let add = PlanOp::AddRequest {
            req: "a".into(),
            prompt: Tokens::Ids {
                ids: vec![1, 2, 3, 4, 5],
            },
            cache_salt: None,
        };
        e.apply(&add).unwrap();
        let sched = PlanOp::Schedule {
            req: "a".into(),
            num_new_tokens: 5,
            use_prefix_cache: true,
            full_sequence_must_fit: false,
            delay_cache_blocks: false,
            expect: Default::default(),
        };
        e.apply(&sched).unwrap();
        let free_before = e.kv.pool.num_free_blocks();
        assert_eq!(e.finish_requests(&["ghost", "a", "a"], true), ["a"]);
        assert_eq!(e.kv.pool.num_free_blocks(), free_before, "fenced: held until processed");
        assert_eq!(e.retained().len(), 2);
        e.apply(&PlanOp::ProcessOutputs { lag: 0 }).unwrap();
        assert_eq!(e.kv.pool.num_free_blocks(), free_before + 2);
        assert!(e.finish_requests(&["a"], false).is_empty(), "a finished id is ignored");
    }
}
