//! Mamba "align" mode (vllm_kv.md §3.6): table entry i is the state after
//! (i+1)·block_size tokens; at most the running and the previous state are real.
//! Core subset: no speculative blocks, no prefill checkpoints, no partial hits.

use super::{cdiv, GroupManager};
use crate::kv::block_pool::{BlockPool, PoolError, NULL_BLOCK};
use crate::kv::request::ReqId;

impl GroupManager {
    pub(super) fn mamba_num_blocks_to_allocate(
        &self,
        pool: &BlockPool,
        req: ReqId,
        hits: &[u32],
        num_tokens_main_model: u64,
    ) -> i64 {
        let required = cdiv(num_tokens_main_model as i64, self.bs());
        let mut new = required - hits.len() as i64 - self.table(req).len() as i64;
        if new > 0 {
            // Physical cap: one new running-state block per allocation.
            new = new.min(1);
        }
        // Quirk kept on purpose: a negative count is returned as is and offsets
        // the other groups' needs in the coordinator's sum.
        new + Self::evictable(pool, hits)
    }

    pub(super) fn mamba_allocate_new_blocks(
        &mut self,
        pool: &mut BlockPool,
        req: ReqId,
        num_tokens_main_model: u64,
    ) -> Result<Vec<u32>, PoolError> {
        let required = cdiv(num_tokens_main_model as i64, self.bs()).max(0) as usize;
        let table = self.tables.entry(req).or_default();
        if required <= table.len() {
            self.allocated.insert(req);
            return Ok(Vec::new());
        }
        let prev = table.len();
        // Already allocated: the old running state; else a prefix hit's state block.
        if prev > 0 {
            self.last_state_idx.insert(req, prev - 1);
        }
        let run_idx = required - 1;
        if prev < run_idx {
            table.resize(run_idx, NULL_BLOCK);
        }
        let new = required.saturating_sub(table.len());
        if new > 1 {
            return Err(PoolError {
                kind: "AssertionError",
                message: format!("mamba align allocation of {new} blocks (at most 1)"),
            });
        }
        let new_blocks = pool.get_new_blocks(new)?;
        let mut returned = table[prev..].to_vec();
        table.extend_from_slice(&new_blocks);
        returned.extend_from_slice(&new_blocks);
        self.allocated.insert(req);
        Ok(returned)
    }

    /// Range freeing that skips interior nulls and never revisits retired entries.
    pub(super) fn mamba_remove_blocks_in_range(&mut self, pool: &mut BlockPool, req: ReqId, first: usize, last: usize) {
        let retired = self.num_retired.get(&req).copied().unwrap_or(0);
        let Some(table) = self.tables.get_mut(&req) else { return };
        let first = first.max(retired);
        let last = last.min(table.len());
        if first >= last {
            return;
        }
        let mut freed = Vec::new();
        for i in (first..last).rev() {
            if table[i] != NULL_BLOCK {
                freed.push(table[i]);
                table[i] = NULL_BLOCK;
            }
        }
        pool.free_blocks(freed);
        self.num_retired.insert(req, last);
    }

    /// Retire the previous state block once the running state has moved past it.
    pub(super) fn mamba_retire_last_state(&mut self, pool: &mut BlockPool, req: ReqId, processed: u64) {
        let Some(&idx) = self.last_state_idx.get(&req) else {
            return;
        };
        if (idx as i64) < cdiv(processed as i64, self.bs()) - 1 {
            let table = self.tables.entry(req).or_default();
            if table[idx] != NULL_BLOCK {
                pool.free_blocks([table[idx]]);
                table[idx] = NULL_BLOCK;
            }
        }
    }
}
