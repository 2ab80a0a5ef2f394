//! A step that changes nothing in a group. Most `allocate_slots` calls without hits
//! (a decode step, a prefill chunk inside blocks already held) free no block from a
//! window, need no new block and make no block newly full: telling that from the
//! request's entry alone spares the steps that would each find nothing to do.

use super::{cdiv, GroupManager, GroupReq};
use crate::kv::block_pool::NULL_BLOCK;
use crate::kv::request::Request;

impl GroupManager {
    /// Whether this group's part of `allocate_slots` without hits (trim the window
    /// after `processed` tokens, grow the table to `need_slot` tokens, register the
    /// blocks full after `cache`'s tokens) would change nothing, its need 0 and the
    /// table covering `need_slot` already. Outside Mamba "align" and slips, and with
    /// the request's hashes up to date. `false` does not mean something changes.
    #[inline(always)]
    pub(crate) fn steady(
        &self,
        st: &GroupReq,
        request: &Request,
        (processed, need_slot): (u64, u64),
        cache: Option<(u64, u64)>,
    ) -> bool {
        debug_assert!(!self.is_mamba_align() && self.slip.is_none());
        let len = st.blocks.len();
        if !st.has_table {
            return false;
        }
        let full_attention = self.spec.kind.is_full_attention_spec();
        // `remove_skipped_blocks`: freeing stops at the first null from the right.
        if !full_attention {
            let skipped = self.spec.kind.skipped_tokens(processed as i64);
            if skipped > 0 {
                let n = (self.blocks_of(skipped as u64) as usize).min(len);
                if n > 0 && st.blocks[n - 1] != NULL_BLOCK {
                    return false;
                }
            }
        }
        // `allocate_new_blocks` finds the table long enough (so the need is 0).
        let required = self.blocks_of(need_slot + self.spec.block_size - 1) as usize;
        if required > len {
            return false;
        }
        self.caches_nothing_new(st, request, cache)
    }

    /// `steady` for a Mamba "align" group: no retired entry and no previous state left
    /// to free, the running state allocated and covering `main` tokens, no block newly
    /// full. `Some(need)`: its `get_num_blocks_to_allocate`, which may be negative.
    #[inline]
    pub(crate) fn steady_align(
        &self,
        st: &GroupReq,
        request: &Request,
        (processed, main): (u64, u64),
        cache: Option<(u64, u64)>,
    ) -> Option<i64> {
        debug_assert!(self.is_mamba_align() && self.slip.is_none());
        if !st.has_table || !st.allocated {
            return None;
        }
        let (len, bs) = (st.blocks.len(), self.bs());
        // `mamba_remove_blocks_in_range(0, n)`: the entries below `num_retired` are done.
        let skipped = self.spec.kind.skipped_tokens(processed as i64);
        if skipped > 0 && ((skipped / bs) as usize).min(len) > st.num_retired.unwrap_or(0) {
            return None;
        }
        // `mamba_retire_last_state`.
        if let Some(idx) = st.last_state_idx {
            if (idx as i64) < cdiv(processed as i64, bs) - 1 && st.blocks[idx] != NULL_BLOCK {
                return None;
            }
        }
        // `mamba_allocate_new_blocks` finds the running state there.
        let required = cdiv(main as i64, bs);
        if required > len as i64 || !self.caches_nothing_new(st, request, cache) {
            return None;
        }
        Some(required - len as i64)
    }

    /// `cache_blocks` after `cache`'s tokens finds no block newly full and no partial
    /// tail to register (`None`: the step caches nothing).
    #[inline(always)]
    fn caches_nothing_new(&self, st: &GroupReq, request: &Request, cache: Option<(u64, u64)>) -> bool {
        match cache {
            None => true,
            Some((n, hbs)) => {
                let hashed = request.block_hashes.len() as u64 * hbs;
                let full = self.blocks_of(n.min(hashed)) as usize;
                full <= st.num_cached.unwrap_or(0) && !self.caches_partial_tail(hbs)
            }
        }
    }

    /// Whole blocks in `tokens` tokens: a shift for the usual power-of-two sizes.
    #[inline(always)]
    fn blocks_of(&self, tokens: u64) -> u64 {
        let bs = self.spec.block_size;
        if bs.is_power_of_two() {
            tokens >> bs.trailing_zeros()
        } else {
            tokens / bs
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{GroupManager, GroupReq, TableLog};
    use crate::kv::{BlockPool, GroupKind, GroupSpec, Request};

    /// A Mamba "align" table adopted from a hit is not yet noted as allocated: the
    /// allocation notes it, so such a step is not steady even when it draws nothing.
    #[test]
    fn an_align_state_not_yet_noted_as_allocated_is_not_steady() {
        let spec = GroupSpec {
            kind: GroupKind::MAMBA_STATE,
            block_size: 4,
        };
        let mut m = GroupManager::new(0, spec, true, None);
        let mut pool = BlockPool::new(8, true);
        let req = Request::new(0, (0..8).collect(), None, Some(4));
        let (mut st, mut log) = (GroupReq::default(), TableLog::default());
        st.has_table = true;
        st.blocks = pool.get_new_blocks(2).unwrap();
        let (processed, main) = (0, 8);
        assert_eq!(m.steady_align(&st, &req, (processed, main), None), None);
        let mut out = Vec::new();
        m.allocate_new_blocks_into(&mut pool, (0, &mut st, &mut log), main, main, &mut out)
            .unwrap();
        assert!(out.is_empty() && st.allocated, "nothing drawn, the allocation noted");
        assert_eq!(m.steady_align(&st, &req, (processed, main), None), Some(0));
    }
}
