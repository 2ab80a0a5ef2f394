//! One single-type manager per cache group over the shared pool
//! (vllm_kv.md §3; vLLM `single_type_kv_cache_manager.py`).
//!
//! All kinds share the base algorithms; the kind decides skipped tokens, the hit
//! finder (`finders.rs`), the caching mask and, for Mamba "align", its own
//! allocation and retirement rules (`mamba.rs`).

mod finders;
mod mamba;

pub use finders::find_longest_cache_hit;

use super::block_pool::{BlockPool, PoolError, NULL_BLOCK};
use super::hash::{BlockKey, FastMap, FastSet};
use super::request::{ReqId, Request};
use super::spec::{GroupKind, GroupSpec, MambaMode};

#[derive(Clone, Debug)]
pub struct GroupManager {
    pub group_id: u32,
    pub spec: GroupSpec,
    pub enable_caching: bool,
    /// Hit alignment; the hybrid coordinator sets it to `scheduler_block_size`.
    pub cache_hit_alignment: u64,
    pub admission_cap: Option<u64>,
    pub(crate) tables: FastMap<ReqId, Vec<u32>>,
    /// Membership means "already running, no new hits possible" (§3.1).
    pub(crate) num_cached: FastMap<ReqId, usize>,
    // Mamba "align" bookkeeping (§3.6).
    pub(crate) allocated: FastSet<ReqId>,
    pub(crate) last_state_idx: FastMap<ReqId, usize>,
    pub(crate) num_retired: FastMap<ReqId, usize>,
    pub(crate) cached_this_step: FastSet<BlockKey>,
}

fn cdiv(a: i64, b: i64) -> i64 {
    (a + b - 1).div_euclid(b)
}

impl GroupManager {
    pub fn new(group_id: u32, spec: GroupSpec, enable_caching: bool, admission_cap: Option<u64>) -> Self {
        GroupManager {
            group_id,
            spec,
            enable_caching,
            cache_hit_alignment: spec.block_size,
            admission_cap,
            tables: FastMap::default(),
            num_cached: FastMap::default(),
            allocated: FastSet::default(),
            last_state_idx: FastMap::default(),
            num_retired: FastMap::default(),
            cached_this_step: FastSet::default(),
        }
    }

    fn bs(&self) -> i64 {
        self.spec.block_size as i64
    }

    pub(crate) fn is_mamba_align(&self) -> bool {
        matches!(
            self.spec.kind,
            GroupKind::Mamba {
                mamba_cache_mode: MambaMode::Align
            }
        )
    }

    /// The request's whole table for this group (nulls included); empty if unknown.
    pub fn table(&self, req: ReqId) -> &[u32] {
        self.tables.get(&req).map_or(&[], Vec::as_slice)
    }

    pub fn tracks_cached(&self, req: ReqId) -> bool {
        self.num_cached.contains_key(&req)
    }

    pub fn num_cached_blocks(&self, req: ReqId) -> Option<usize> {
        self.num_cached.get(&req).copied()
    }

    /// Live request ids with a table in this group (sorted, for checks).
    pub fn request_ids(&self) -> Vec<ReqId> {
        let mut v: Vec<ReqId> = self.tables.keys().copied().collect();
        v.sort_unstable();
        v
    }

    fn evictable(pool: &BlockPool, hits: &[u32]) -> i64 {
        hits.iter()
            .filter(|&&b| b != NULL_BLOCK && pool.ref_cnt(b) == 0)
            .count() as i64
    }

    /// `get_num_blocks_to_allocate` (§3.2, Mamba §3.6). May be negative for Mamba.
    #[allow(clippy::too_many_arguments)]
    pub fn num_blocks_to_allocate(
        &self,
        pool: &BlockPool,
        req: ReqId,
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
                return self.mamba_num_blocks_to_allocate(pool, req, hits, num_tokens_main_model);
            }
        }
        let bs = self.bs();
        let mut required = cdiv(num_tokens as i64, bs);
        if apply_admission_cap {
            if let Some(cap) = self.admission_cap {
                required = required.min(cap as i64);
            }
        }
        let held = self.table(req).len() as i64;
        if self.num_cached.contains_key(&req) {
            return (required - held).max(0);
        }
        let skipped_blocks = self.spec.kind.skipped_tokens(total_computed as i64).div_euclid(bs);
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
        req: ReqId,
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
        let table = self.tables.entry(req).or_default();
        debug_assert!(table.is_empty());
        table.extend(std::iter::repeat_n(NULL_BLOCK, skipped));
        table.extend_from_slice(kept);
        let len = table.len();
        self.num_cached.insert(req, len);
    }

    /// `allocate_new_blocks`: grow the table to cover `num_tokens` slots.
    pub fn allocate_new_blocks(
        &mut self,
        pool: &mut BlockPool,
        req: ReqId,
        num_tokens: u64,
        num_tokens_main_model: u64,
    ) -> Result<Vec<u32>, PoolError> {
        if self.is_mamba_align() {
            return self.mamba_allocate_new_blocks(pool, req, num_tokens_main_model);
        }
        let table = self.tables.entry(req).or_default();
        let new = cdiv(num_tokens as i64, self.spec.block_size as i64) - table.len() as i64;
        if new <= 0 {
            return Ok(Vec::new());
        }
        let blocks = pool.get_new_blocks(new as usize)?;
        table.extend_from_slice(&blocks);
        Ok(blocks)
    }

    /// `cache_blocks`: register the newly full blocks of the request (§3.2).
    pub fn cache_blocks(
        &mut self,
        pool: &mut BlockPool,
        request: &Request,
        num_tokens: u64,
        hash_block_size: u64,
    ) -> Result<(), PoolError> {
        let req = request.id;
        let bs = self.spec.block_size;
        let before = self.num_cached.get(&req).copied().unwrap_or(0);
        let hashed = request.block_hashes.len() as u64 * hash_block_size;
        let full = (num_tokens.min(hashed) / bs) as usize;
        if before < full {
            let mask = self.reachable_block_mask(before, full);
            let scale = (bs / hash_block_size) as usize;
            let table = self.tables.get(&req).map_or(&[][..], Vec::as_slice);
            let end = full.min(table.len());
            let new_blocks: Vec<(usize, u32)> = (before..end).map(|i| (i, table[i])).collect();
            for (i, blk) in new_blocks {
                if blk == NULL_BLOCK || mask.as_ref().is_some_and(|m| !m[i - before]) {
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
            self.num_cached.insert(req, full);
            if matches!(self.spec.kind, GroupKind::Mamba { .. }) {
                for i in before..end {
                    let blk = self.table(req)[i];
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
        if self.spec.kind.is_full_attention_spec() && bs != hash_block_size {
            self.cache_partial_tail_block(pool, request, num_tokens, hash_block_size);
        }
        Ok(())
    }

    fn cache_partial_tail_block(&self, pool: &mut BlockPool, request: &Request, num_tokens: u64, hbs: u64) {
        let limit = request.num_prompt_tokens.saturating_sub(1);
        let boundary = (limit / hbs).min(request.block_hashes.len() as u64) * hbs;
        if boundary == 0 || boundary > num_tokens || boundary.is_multiple_of(self.spec.block_size) {
            return;
        }
        let table = self.table(request.id);
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
    /// trailing blocks of each aligned segment can serve a sliding-window hit (§3.4).
    fn reachable_block_mask(&self, start: usize, end: usize) -> Option<Vec<bool>> {
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
        Some((start..end).map(|i| i % per_segment >= per_segment - need).collect())
    }

    /// `remove_skipped_blocks`: free blocks that left the window (§3.2).
    pub fn remove_skipped_blocks(&mut self, pool: &mut BlockPool, req: ReqId, processed: u64) {
        let skipped = self.spec.kind.skipped_tokens(processed as i64);
        if skipped > 0 {
            if let Some(table) = self.tables.get(&req) {
                let n = ((skipped / self.bs()) as usize).min(table.len());
                self.remove_blocks_in_range(pool, req, 0, n);
            }
        }
        if self.is_mamba_align() {
            self.mamba_retire_last_state(pool, req, processed);
        }
    }

    fn remove_blocks_in_range(&mut self, pool: &mut BlockPool, req: ReqId, first: usize, last: usize) {
        if self.is_mamba_align() {
            return self.mamba_remove_blocks_in_range(pool, req, first, last);
        }
        let Some(table) = self.tables.get_mut(&req) else { return };
        let last = last.min(table.len());
        let mut freed = Vec::new();
        for i in (first..last).rev() {
            if table[i] == NULL_BLOCK {
                break;
            }
            freed.push(table[i]);
            table[i] = NULL_BLOCK;
        }
        pool.free_blocks(freed);
    }

    /// `pop_blocks_for_free`: the table without its leading nulls (0.33 `trim_null_head`).
    pub fn pop_blocks_for_free(&mut self, req: ReqId) -> Vec<u32> {
        let table = self.tables.remove(&req).unwrap_or_default();
        self.num_cached.remove(&req);
        self.allocated.remove(&req);
        self.last_state_idx.remove(&req);
        self.num_retired.remove(&req);
        let head = table.iter().take_while(|&&b| b == NULL_BLOCK).count();
        table[head..].to_vec()
    }

    /// `free`: the table tail-first.
    pub fn free(&mut self, pool: &mut BlockPool, req: ReqId) {
        let blocks = self.pop_blocks_for_free(req);
        pool.free_blocks(blocks.into_iter().rev());
    }

    /// `new_step_starts`: Mamba forgets which states were cached this step.
    pub fn new_step_starts(&mut self) {
        self.cached_this_step.clear();
    }
}
