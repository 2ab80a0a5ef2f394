//! One single-type manager per cache group over the shared pool
//! (vllm_kv.md §3; vLLM `single_type_kv_cache_manager.py`).
//!
//! All kinds share the base algorithms; the kind decides skipped tokens, the hit
//! finder (`finders.rs`), the caching mask and, for Mamba "align", its own
//! allocation and retirement rules (`mamba.rs`).

mod finders;
mod mamba;
mod req_state;
mod steady;
mod steady_memo;

pub use finders::{empty_lists, find_longest_cache_hit_into};
pub use req_state::{GroupReq, ReqStates, TableLog};
pub(crate) use steady_memo::SteadyMemo;

use super::block_pool::{BlockPool, PoolError, NULL_BLOCK};
use super::hash::{BlockKey, FastSet};
use super::mutant::ManagerSlip;
use super::request::{ReqId, Request};
use super::spec::{GroupKind, GroupSpec, MambaMode};

/// One cache group's manager (full, sliding window, chunked local, Mamba; vllm_kv.md §3).
/// Its per-request dicts live request-major in `ReqStates`: each method is handed the
/// request's entry in this group (`GroupReq`).
#[derive(Debug)]
pub struct GroupManager {
    /// Its group id.
    pub group_id: u32,
    /// Its spec.
    pub spec: GroupSpec,
    /// Prefix caching on.
    pub enable_caching: bool,
    /// Hit alignment; the hybrid coordinator sets it to `scheduler_block_size`.
    pub cache_hit_alignment: u64,
    /// The admission cap of a windowed group (peak reservation).
    pub admission_cap: Option<u64>,
    /// Mamba: the keys cached this step (§3.6).
    pub(crate) cached_this_step: FastSet<BlockKey>,
    /// A deliberate slip (issue 19), off in every real run.
    pub(crate) slip: Option<ManagerSlip>,
}

reuse_clone!(GroupManager {
    group_id,
    spec,
    enable_caching,
    cache_hit_alignment,
    admission_cap,
    cached_this_step,
    slip
});

#[inline]
fn cdiv(a: i64, b: i64) -> i64 {
    // Block sizes are nearly always powers of two: an arithmetic shift floors
    // exactly like `div_euclid` and spares a 64-bit division on the hot path.
    if b > 0 && b & (b - 1) == 0 {
        (a + b - 1) >> b.trailing_zeros()
    } else {
        (a + b - 1).div_euclid(b)
    }
}

impl GroupManager {
    /// A manager for group `group_id`.
    pub fn new(group_id: u32, spec: GroupSpec, enable_caching: bool, admission_cap: Option<u64>) -> Self {
        GroupManager {
            group_id,
            spec,
            enable_caching,
            cache_hit_alignment: spec.block_size,
            admission_cap,
            cached_this_step: FastSet::default(),
            slip: None,
        }
    }

    /// Become `new(group_id, spec, enable_caching, admission_cap)`, reusing this
    /// manager's storage.
    pub fn reset_to(&mut self, group_id: u32, spec: GroupSpec, enable_caching: bool, admission_cap: Option<u64>) {
        (self.group_id, self.spec, self.enable_caching) = (group_id, spec, enable_caching);
        self.cache_hit_alignment = spec.block_size;
        self.admission_cap = admission_cap;
        self.cached_this_step.clear();
        self.slip = None;
    }

    #[inline]
    fn bs(&self) -> i64 {
        self.spec.block_size as i64
    }

    #[inline]
    pub(crate) fn is_mamba_align(&self) -> bool {
        matches!(
            self.spec.kind,
            GroupKind::Mamba {
                mamba_cache_mode: MambaMode::Align
            }
        )
    }

    /// `num_blocks_to_allocate` offered no hits, outside Mamba "align" (whose needs
    /// follow other rules), uncapped, and whether the request has a table here.
    #[inline]
    pub(crate) fn need_without_hits(&self, st: &GroupReq, num_tokens: u64, total_computed: u64) -> (i64, bool) {
        (
            self.need_no_hit_blocks(st, num_tokens, total_computed, false),
            st.has_table,
        )
    }

    /// `num_blocks_to_allocate` offered no hit blocks, outside Mamba "align": nothing is
    /// evictable and Mamba's "cached this step" sentinel needs a hit, so it is the table's
    /// shortfall alone (`admission_cap` applied when `capped`).
    #[inline(always)]
    pub(crate) fn need_no_hit_blocks(&self, st: &GroupReq, num_tokens: u64, total_computed: u64, capped: bool) -> i64 {
        debug_assert!(!self.is_mamba_align());
        let required = self.required_blocks(num_tokens, capped);
        let held = st.blocks.len() as i64;
        // A request with nothing computed skips no block (Mamba's -1 token floors to -1).
        if st.num_cached.is_some() || total_computed == 0 {
            return (required - held).max(0);
        }
        let skipped_blocks = self
            .spec
            .kind
            .skipped_tokens(total_computed as i64)
            .div_euclid(self.bs());
        (required - skipped_blocks.max(held)).max(0)
    }

    /// The blocks `num_tokens` slots take, at most `admission_cap` when `capped`.
    #[inline(always)]
    fn required_blocks(&self, num_tokens: u64, capped: bool) -> i64 {
        let required = cdiv(num_tokens as i64, self.bs());
        match self.admission_cap {
            Some(cap) if capped => required.min(cap as i64),
            _ => required,
        }
    }

    fn evictable(pool: &BlockPool, hits: &[u32]) -> i64 {
        hits.iter()
            .filter(|&&b| b != NULL_BLOCK && pool.ref_cnt(b) == 0)
            .count() as i64
    }

    /// `get_num_blocks_to_allocate` (§3.2, Mamba §3.6) for the request's entry `st`.
    /// May be negative for Mamba. Inlined into the sums over the groups.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub fn num_blocks_to_allocate(
        &self,
        pool: &BlockPool,
        st: &GroupReq,
        num_tokens: u64,
        hits: &[u32],
        total_computed: u64,
        num_tokens_main_model: u64,
        apply_admission_cap: bool,
    ) -> i64 {
        if let GroupKind::Mamba { mamba_cache_mode } = self.spec.kind {
            // The "cached this step" sentinel forces allocate_slots to refuse.
            if let Some(&last) = hits.last() {
                if pool
                    .block_hash(last)
                    .is_some_and(|t| self.cached_this_step.contains(&t.key))
                {
                    return pool.num_blocks() as i64 + 1;
                }
            }
            if mamba_cache_mode == MambaMode::Align {
                return self.mamba_num_blocks_to_allocate(pool, st, hits, num_tokens_main_model);
            }
        }
        let required = self.required_blocks(num_tokens, apply_admission_cap);
        let held = st.blocks.len() as i64;
        if st.num_cached.is_some() {
            return (required - held).max(0);
        }
        let skipped_blocks = self
            .spec
            .kind
            .skipped_tokens(total_computed as i64)
            .div_euclid(self.bs());
        let local_blocks = hits.len() as i64 + held;
        let new = (required - skipped_blocks.max(local_blocks)).max(0);
        let skip_in_hits = (skipped_blocks - held).max(0) as usize;
        let evictable = Self::evictable(pool, hits.get(skip_in_hits..).unwrap_or(&[]));
        new + evictable
    }

    /// `add_local_computed_blocks`: adopt hits (first allocation only).
    pub fn add_local_computed_blocks(
        &mut self,
        pool: &mut BlockPool,
        (req, st, log): (ReqId, &mut GroupReq, &mut TableLog),
        hits: &[u32],
        num_local_computed: u64,
    ) {
        let skipped = self
            .spec
            .kind
            .skipped_tokens(num_local_computed as i64)
            .div_euclid(self.bs());
        let skipped = skipped.max(0) as usize;
        let kept = hits.get(skipped..).unwrap_or(&[]);
        if self.enable_caching {
            pool.touch(kept);
        }
        log.touch(self.group_id, req, st);
        st.has_table = true;
        debug_assert!(st.blocks.is_empty());
        st.blocks.extend(std::iter::repeat_n(NULL_BLOCK, skipped));
        st.blocks.extend_from_slice(kept);
        st.num_cached = Some(st.blocks.len());
    }

    /// `allocate_new_blocks`: grow the table to cover `num_tokens` slots, appending
    /// the returned blocks to `out`. Inlined into the loop over the groups.
    #[inline(always)]
    pub fn allocate_new_blocks_into(
        &mut self,
        pool: &mut BlockPool,
        (req, st, log): (ReqId, &mut GroupReq, &mut TableLog),
        num_tokens: u64,
        num_tokens_main_model: u64,
        out: &mut Vec<u32>,
    ) -> Result<(), PoolError> {
        if self.is_mamba_align() {
            return self.mamba_allocate_new_blocks(pool, (req, st, log), num_tokens_main_model, out);
        }
        let new = cdiv(num_tokens as i64, self.spec.block_size as i64) - st.blocks.len() as i64;
        if new <= 0 {
            if !st.has_table {
                // vLLM's defaultdict makes the empty table.
                log.touch(self.group_id, req, st);
                st.has_table = true;
            }
            return Ok(());
        }
        log.touch(self.group_id, req, st);
        st.has_table = true;
        let table = &mut st.blocks;
        let start = table.len();
        pool.get_new_blocks_into(new as usize, table)?;
        // Usually one new block: a push, not a memcpy call.
        match &table[start..] {
            [b] => out.push(*b),
            new => out.extend_from_slice(new),
        }
        Ok(())
    }

    /// `cache_blocks`: register the newly full blocks of the request (§3.2).
    /// Inlined: most calls (a decode step inside a block) find nothing to register,
    /// and return before the call that would save and restore every register.
    #[inline]
    pub fn cache_blocks(
        &mut self,
        pool: &mut BlockPool,
        request: &Request,
        st: &mut GroupReq,
        num_tokens: u64,
        hash_block_size: u64,
    ) -> Result<(), PoolError> {
        let (before, full) = self.blocks_to_cache(st.num_cached, request, num_tokens, hash_block_size);
        // `caches_nothing`'s test, on the values already at hand.
        if before >= full && !self.caches_partial_tail(hash_block_size) {
            return Ok(());
        }
        self.cache_new_blocks(pool, request, st, num_tokens, hash_block_size, before, full)
    }

    /// `cache_blocks` past its early return: blocks `before..full` of the table are new.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn cache_new_blocks(
        &mut self,
        pool: &mut BlockPool,
        request: &Request,
        st: &mut GroupReq,
        num_tokens: u64,
        hash_block_size: u64,
        before: usize,
        full: usize,
    ) -> Result<(), PoolError> {
        let bs = self.spec.block_size;
        if before < full {
            let reachable = self.reachable_blocks();
            // Usually one group, or groups of one block size: no division.
            let scale = if bs == hash_block_size {
                1
            } else {
                (bs / hash_block_size) as usize
            };
            let table = st.blocks.as_slice();
            let end = full.min(table.len());
            let new = table.get(before..end).unwrap_or(&[]);
            for (i, &blk) in (before..).zip(new) {
                if blk == NULL_BLOCK || reachable.is_some_and(|(per, need)| i % per < per - need) {
                    continue;
                }
                // The coarse view: element i is the last fine hash inside block i (§2.6).
                let hash = request.block_hashes[(i + 1) * scale - 1];
                let key = BlockKey {
                    hash,
                    group: self.group_id,
                };
                pool.cache_full_block(key, blk, (i as u64 + 1) * bs)?;
            }
            st.num_cached = Some(full);
            if matches!(self.spec.kind, GroupKind::Mamba { .. }) {
                for &blk in new {
                    if blk != NULL_BLOCK {
                        if let Some(tag) = pool.block_hash(blk) {
                            self.cached_this_step.insert(tag.key);
                        }
                    }
                }
            }
        }
        // Full attention with a block larger than the hash block also registers the
        // prompt's last hash boundary inside a block (`_cache_partial_tail_block`).
        // Mamba's own partial tail is a no-op when its block equals the hash block,
        // which kvtrace/1 requires.
        if self.caches_partial_tail(hash_block_size) {
            self.cache_partial_tail_block(pool, request, st.table().unwrap_or(&[]), num_tokens, hash_block_size);
        }
        Ok(())
    }

    /// The request's blocks already registered (`num_cached`) and those full after
    /// `num_tokens`: `cache_blocks` registers the ones between.
    #[inline]
    fn blocks_to_cache(
        &self,
        num_cached: Option<usize>,
        request: &Request,
        num_tokens: u64,
        hash_block_size: u64,
    ) -> (usize, usize) {
        let before = num_cached.unwrap_or(0);
        let hashed = request.block_hashes.len() as u64 * hash_block_size;
        (before, (num_tokens.min(hashed) / self.spec.block_size) as usize)
    }

    fn caches_partial_tail(&self, hash_block_size: u64) -> bool {
        self.spec.kind.is_full_attention_spec() && self.spec.block_size != hash_block_size
    }

    /// `cache_blocks(request, num_tokens)` would change nothing (no block newly full, no
    /// partial tail to register): what the exhaustive search asks before copying a state.
    pub(crate) fn caches_nothing(
        &self,
        num_cached: Option<usize>,
        request: &Request,
        num_tokens: u64,
        hash_block_size: u64,
    ) -> bool {
        let (before, full) = self.blocks_to_cache(num_cached, request, num_tokens, hash_block_size);
        before >= full && !self.caches_partial_tail(hash_block_size)
    }

    fn cache_partial_tail_block(
        &self,
        pool: &mut BlockPool,
        request: &Request,
        table: &[u32],
        num_tokens: u64,
        hbs: u64,
    ) {
        let limit = request.num_prompt_tokens.saturating_sub(1);
        let boundary = (limit / hbs).min(request.block_hashes.len() as u64) * hbs;
        if boundary == 0 || boundary > num_tokens || boundary.is_multiple_of(self.spec.block_size) {
            return;
        }
        let idx = (boundary / self.spec.block_size) as usize;
        let Some(&blk) = table.get(idx) else { return };
        let hash = request.block_hashes[(boundary / hbs) as usize - 1];
        pool.cache_partial_block(
            BlockKey {
                hash,
                group: self.group_id,
            },
            blk,
            boundary,
        );
    }

    /// `reachable_block_mask`: with a hybrid alignment above the block size, only the
    /// trailing `need` blocks of each aligned segment of `per` blocks can serve a
    /// sliding-window hit (§3.4). `None`: every block is reachable.
    fn reachable_blocks(&self) -> Option<(usize, usize)> {
        let GroupKind::SlidingWindow { sliding_window } = self.spec.kind else {
            return None;
        };
        let (bs, align) = (self.spec.block_size, self.cache_hit_alignment);
        if align % bs != 0 {
            return None;
        }
        let need = (sliding_window - 1).div_ceil(bs) as usize;
        let per_segment = (align / bs) as usize;
        if need >= per_segment {
            return None;
        }
        Some((per_segment, need))
    }

    /// `remove_skipped_blocks`: free blocks that left the window (§3.2). Inlined up to
    /// the usual outcome: full attention and MLA skip no token, and a window or chunk
    /// whose last skipped block is already null has nothing left to free (freeing
    /// stops at the first null from the right).
    #[inline(always)]
    pub fn remove_skipped_blocks(
        &mut self,
        pool: &mut BlockPool,
        (req, st, log): (ReqId, &mut GroupReq, &mut TableLog),
        processed: u64,
    ) {
        match self.spec.kind {
            GroupKind::FullAttention | GroupKind::Mla => {}
            GroupKind::SlidingWindow { .. } | GroupKind::ChunkedLocal { .. } if self.slip.is_none() => {
                let skipped = self.spec.kind.skipped_tokens(processed as i64);
                // A request without a table has no blocks: n is 0.
                let n = ((skipped.max(0) as u64 / self.spec.block_size) as usize).min(st.blocks.len());
                if n > 0 && st.blocks[n - 1] != NULL_BLOCK {
                    self.remove_blocks_in_range(pool, (req, st, log), 0, n);
                }
            }
            _ => self.remove_skipped_blocks_windowed(pool, (req, st, log), processed),
        }
    }

    fn remove_skipped_blocks_windowed(
        &mut self,
        pool: &mut BlockPool,
        (req, st, log): (ReqId, &mut GroupReq, &mut TableLog),
        processed: u64,
    ) {
        if self.slip == Some(ManagerSlip::AlignStatesKept) && self.is_mamba_align() {
            return;
        }
        let skipped = self.spec.kind.skipped_tokens(processed as i64);
        if skipped > 0 && st.has_table {
            let mut n = ((skipped / self.bs()) as usize).min(st.blocks.len());
            if self.slip == Some(ManagerSlip::WindowEdgeKept) {
                n = n.saturating_sub(1);
            }
            self.remove_blocks_in_range(pool, (req, &mut *st, &mut *log), 0, n);
        }
        if self.is_mamba_align() {
            self.mamba_retire_last_state(pool, (req, st, log), processed);
        }
    }

    fn remove_blocks_in_range(
        &mut self,
        pool: &mut BlockPool,
        (req, st, log): (ReqId, &mut GroupReq, &mut TableLog),
        first: usize,
        last: usize,
    ) {
        if self.is_mamba_align() {
            return self.mamba_remove_blocks_in_range(pool, (req, st, log), first, last);
        }
        if !st.has_table {
            return;
        }
        let last = last.min(st.blocks.len());
        // Freeing stops at the first null from the right: nothing to do if the range
        // ends in one (the usual case: those blocks left the window earlier).
        if first >= last || st.blocks[last - 1] == NULL_BLOCK {
            return;
        }
        log.touch(self.group_id, req, st);
        let table = &mut st.blocks;
        pool.free_blocks((first..last).rev().map_while(|i| {
            let b = std::mem::replace(&mut table[i], NULL_BLOCK);
            (b != NULL_BLOCK).then_some(b)
        }));
    }

    /// `pop_blocks_for_free`: the table without its leading nulls (0.33 `trim_null_head`),
    /// appended to `out`; the request leaves every dict.
    pub fn pop_blocks_for_free(&mut self, (req, st, log): (ReqId, &mut GroupReq, &mut TableLog), out: &mut Vec<u32>) {
        let head = st.blocks.iter().take_while(|&&b| b == NULL_BLOCK).count();
        out.extend_from_slice(&st.blocks[head..]);
        log.touch(self.group_id, req, st);
        st.forget();
    }

    /// `free`: the table tail-first; the request leaves every dict.
    pub fn free(&mut self, pool: &mut BlockPool, (req, st, log): (ReqId, &mut GroupReq, &mut TableLog)) {
        let head = st.blocks.iter().take_while(|&&b| b == NULL_BLOCK).count();
        pool.free_blocks(st.blocks[head..].iter().rev().copied());
        log.touch(self.group_id, req, st);
        st.forget();
    }

    /// Mamba's "cached this step" keys in a canonical order (`state_text`).
    #[cfg(test)]
    pub(crate) fn cached_this_step_sorted(&self) -> Vec<BlockKey> {
        let mut step: Vec<BlockKey> = self.cached_this_step.iter().copied().collect();
        step.sort_unstable();
        step
    }

    /// `new_step_starts`: Mamba forgets which states were cached this step (other
    /// kinds never note any: nothing to clear).
    #[inline]
    pub fn new_step_starts(&mut self) {
        if !self.cached_this_step.is_empty() {
            self.cached_this_step.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{cdiv, GroupManager, GroupReq, TableLog};
    use crate::kv::{BlockPool, GroupKind, GroupSpec};

    #[test]
    fn cdiv_rounds_up_like_python_for_any_sign_and_size() {
        for b in 1..=20i64 {
            for a in -50..=50i64 {
                assert_eq!(cdiv(a, b), (a + b - 1).div_euclid(b), "{a} / {b}");
            }
        }
    }

    /// `need_no_hit_blocks` is `num_blocks_to_allocate` offered no hits, for every kind
    /// but Mamba "align", capped or not, with and without a table or cached blocks.
    #[test]
    fn the_need_without_hit_blocks_is_the_general_need_offered_none() {
        use crate::kv::spec::MambaMode;
        let kinds = [
            GroupKind::FullAttention,
            GroupKind::Mla,
            GroupKind::SlidingWindow { sliding_window: 1 },
            GroupKind::SlidingWindow { sliding_window: 6 },
            GroupKind::SlidingWindow { sliding_window: 17 },
            GroupKind::ChunkedLocal {
                attention_chunk_size: 4,
            },
            GroupKind::ChunkedLocal {
                attention_chunk_size: 12,
            },
            GroupKind::Mamba {
                mamba_cache_mode: MambaMode::None,
            },
        ];
        let pool = BlockPool::new(8, true);
        let mut checked = 0;
        for kind in kinds {
            for block_size in [1, 3, 4, 8, 16] {
                let spec = GroupSpec { kind, block_size };
                for cap in [None, Some(1), Some(3), Some(9)] {
                    let m = GroupManager::new(0, spec, true, cap);
                    for held in 0..5usize {
                        for num_cached in [None, Some(0), Some(held)] {
                            let st = GroupReq {
                                blocks: vec![1; held],
                                has_table: held > 0 || num_cached.is_some(),
                                num_cached,
                                ..GroupReq::default()
                            };
                            for tokens in 0..70u64 {
                                for computed in [0, 1, 2, 5, 16, 17, 40, 69] {
                                    for capped in [false, true] {
                                        let general =
                                            m.num_blocks_to_allocate(&pool, &st, tokens, &[], computed, tokens, capped);
                                        let mine = m.need_no_hit_blocks(&st, tokens, computed, capped);
                                        assert_eq!(mine, general, "{spec:?} cap {cap:?} held {held} cached {num_cached:?} tokens {tokens} computed {computed} capped {capped}");
                                        checked += 1;
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 100_000);
    }

    #[test]
    fn a_request_is_tracked_from_adopting_its_hits_until_it_is_freed() {
        let spec = GroupSpec {
            kind: GroupKind::FullAttention,
            block_size: 4,
        };
        let mut pool = BlockPool::new(8, true);
        let mut m = GroupManager::new(0, spec, true, None);
        let (mut st, mut log) = (GroupReq::default(), TableLog::default());
        let hits = pool.get_new_blocks(2).unwrap();
        assert!(st.num_cached.is_none(), "nothing adopted yet");
        m.add_local_computed_blocks(&mut pool, (7, &mut st, &mut log), &hits, 8);
        assert_eq!(st.num_cached, Some(2), "the hits are the request's cached blocks");
        assert_eq!(st.table(), Some(&hits[..]));
        // A tracked request needs only what its table lacks: the hits are not counted again.
        assert_eq!(m.num_blocks_to_allocate(&pool, &st, 12, &hits, 8, 12, false), 1);
        m.free(&mut pool, (7, &mut st, &mut log));
        assert_eq!(
            (st.num_cached, st.table()),
            (None, None),
            "a freed request is forgotten"
        );
        assert!(hits.iter().all(|&b| pool.ref_cnt(b) == 1), "its references are dropped");
    }
}
