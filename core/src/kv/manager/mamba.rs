//! Mamba "align" mode (vllm_kv.md §3.6): table entry i is the state after
//! (i+1)·block_size tokens; at most the running and the previous state are real.
//! Core subset: no speculative blocks, no prefill checkpoints, no partial hits.

use super::{cdiv, GroupManager, GroupReq, TableLog};
use crate::kv::block_pool::{BlockPool, PoolError, NULL_BLOCK};
use crate::kv::request::ReqId;

impl GroupManager {
    pub(super) fn mamba_num_blocks_to_allocate(
        &self,
        pool: &BlockPool,
        st: &GroupReq,
        hits: &[u32],
        num_tokens_main_model: u64,
    ) -> i64 {
        let required = cdiv(num_tokens_main_model as i64, self.bs());
        let mut new = required - hits.len() as i64 - st.blocks.len() as i64;
        if new > 0 {
            // Physical cap: one new running-state block per allocation.
            new = new.min(1);
        }
        // Quirk kept on purpose: a negative count is returned as is and offsets
        // the other groups' needs in the coordinator's sum.
        new + Self::evictable(pool, hits)
    }

    #[inline(never)]
    pub(super) fn mamba_allocate_new_blocks(
        &mut self,
        pool: &mut BlockPool,
        (req, st, log): (ReqId, &mut GroupReq, &mut TableLog),
        num_tokens_main_model: u64,
        out: &mut Vec<u32>,
    ) -> Result<(), PoolError> {
        let required = cdiv(num_tokens_main_model as i64, self.bs()).max(0) as usize;
        if required <= st.blocks.len() {
            if !st.has_table {
                // vLLM's defaultdict makes the empty table.
                log.touch(self.group_id, req, st);
                st.has_table = true;
            }
            st.allocated = true;
            return Ok(());
        }
        log.touch(self.group_id, req, st);
        st.has_table = true;
        let table = &mut st.blocks;
        let prev = table.len();
        // Already allocated: the old running state; else a prefix hit's state block.
        if prev > 0 {
            st.last_state_idx = Some(prev - 1);
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
        pool.get_new_blocks_into(new, table)?;
        out.extend_from_slice(&table[prev..]);
        st.allocated = true;
        Ok(())
    }

    /// Range freeing that skips interior nulls and never revisits retired entries.
    pub(super) fn mamba_remove_blocks_in_range(
        &mut self,
        pool: &mut BlockPool,
        (req, st, log): (ReqId, &mut GroupReq, &mut TableLog),
        first: usize,
        last: usize,
    ) {
        let retired = st.num_retired.unwrap_or(0);
        if !st.has_table {
            return;
        }
        let first = first.max(retired);
        let last = last.min(st.blocks.len());
        if first >= last {
            return;
        }
        log.touch(self.group_id, req, st);
        let table = &mut st.blocks;
        pool.free_blocks((first..last).rev().filter_map(|i| {
            let b = std::mem::replace(&mut table[i], NULL_BLOCK);
            (b != NULL_BLOCK).then_some(b)
        }));
        st.num_retired = Some(last);
    }

    /// Retire the previous state block once the running state has moved past it.
    pub(super) fn mamba_retire_last_state(
        &mut self,
        pool: &mut BlockPool,
        (req, st, log): (ReqId, &mut GroupReq, &mut TableLog),
        processed: u64,
    ) {
        let Some(idx) = st.last_state_idx else {
            return;
        };
        if (idx as i64) < cdiv(processed as i64, self.bs()) - 1 {
            let blk = st.blocks[idx];
            if blk != NULL_BLOCK {
                pool.free_blocks([blk]);
                log.touch(self.group_id, req, st);
                st.blocks[idx] = NULL_BLOCK;
            }
        }
    }
}
