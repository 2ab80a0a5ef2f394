//! vLLM's `BlockPool` (vllm_kv.md §1): ref counts, the free queue, the prefix-cache
//! map keyed by (hash, group) with duplicates, lazy eviction, and the reset.

use super::free_queue::FreeQueue;
use super::hash::{BlockKey, FastMap};
use super::mutant::ModelMutant;

/// Block 0 is the null block: a table placeholder, never handed out or cached.
pub const NULL_BLOCK: u32 = 0;

/// A block's primary prefix-cache key and the prefix length it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHashTag {
    pub key: BlockKey,
    pub num_tokens: u64,
}

/// The pool's internal consistency was violated (a model bug, never user input).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct PoolError {
    /// The Python exception vLLM would raise here (e.g. `ValueError`, `AssertionError`).
    pub kind: &'static str,
    pub message: String,
}

#[derive(Clone, Debug)]
pub struct BlockPool {
    num_blocks: u32,
    enable_caching: bool,
    ref_cnt: Vec<u32>,
    primary: Vec<Option<BlockHashTag>>,
    /// Secondary keys of blocks that already have a primary (`cached_block_hashes_by_block`).
    secondary: FastMap<u32, Vec<BlockKey>>,
    /// Key → block ids in insertion order; the first is what lookups return.
    cached: FastMap<BlockKey, Vec<u32>>,
    free: FreeQueue,
    /// A deliberate bug, switched on only to show that invariant checks can fail.
    mutant: Option<ModelMutant>,
}

impl BlockPool {
    pub fn new(num_blocks: u32, enable_caching: bool) -> Self {
        Self::with_mutant(num_blocks, enable_caching, None)
    }

    pub fn with_mutant(num_blocks: u32, enable_caching: bool, mutant: Option<ModelMutant>) -> Self {
        // The null block is the first popleft of the fresh queue (§1.4 step 6).
        let first = if mutant == Some(ModelMutant::HandOutNullBlock) {
            0
        } else {
            1
        };
        let free = FreeQueue::new(num_blocks as usize, first..num_blocks);
        BlockPool {
            num_blocks,
            enable_caching,
            ref_cnt: vec![0; num_blocks as usize],
            primary: vec![None; num_blocks as usize],
            secondary: FastMap::default(),
            cached: FastMap::default(),
            free,
            mutant,
        }
    }

    pub fn num_blocks(&self) -> u32 {
        self.num_blocks
    }

    pub fn enable_caching(&self) -> bool {
        self.enable_caching
    }

    pub fn num_free_blocks(&self) -> usize {
        self.free.len()
    }

    pub fn ref_cnt(&self, id: u32) -> u32 {
        self.ref_cnt[id as usize]
    }

    pub fn block_hash(&self, id: u32) -> Option<BlockHashTag> {
        self.primary[id as usize]
    }

    pub fn in_free_queue(&self, id: u32) -> bool {
        self.free.contains(id)
    }

    pub fn free_queue(&self) -> impl Iterator<Item = u32> + '_ {
        self.free.iter()
    }

    /// Distinct keys in the prefix-cache map (`len(BlockHashToBlockMap)`).
    pub fn num_cached_keys(&self) -> usize {
        self.cached.len()
    }

    /// Ascending ids of blocks that carry a prefix-cache hash.
    pub fn cached_block_ids(&self) -> impl Iterator<Item = u32> + '_ {
        (1..self.num_blocks).filter(|&b| self.primary[b as usize].is_some())
    }

    /// Block ids registered under `key`, first-inserted first.
    pub fn blocks_for_key(&self, key: &BlockKey) -> &[u32] {
        self.cached.get(key).map_or(&[], Vec::as_slice)
    }

    /// Every key that points at `id` (primary first, then secondaries).
    pub fn keys_of(&self, id: u32) -> Vec<BlockKey> {
        let mut keys: Vec<BlockKey> = self.primary[id as usize].iter().map(|t| t.key).collect();
        if let Some(s) = self.secondary.get(&id) {
            keys.extend(s.iter().copied());
        }
        keys
    }

    /// `get_cached_block`: one block per group, or `None` if any group misses (§1.5).
    pub fn get_cached_block(&self, hash: u128, groups: &[u32]) -> Option<Vec<u32>> {
        groups
            .iter()
            .map(|&group| self.cached.get(&BlockKey { hash, group }).map(|v| v[0]))
            .collect()
    }

    /// `get_new_blocks`: pop from the front, evict their cache entries, ref = 1.
    pub fn get_new_blocks(&mut self, n: usize) -> Result<Vec<u32>, PoolError> {
        if n > self.free.len() {
            return Err(PoolError {
                kind: "ValueError",
                message: format!("Cannot get {n} free blocks from the pool"),
            });
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let id = self.free.pop_front().expect("length checked above");
            if self.enable_caching {
                if self.mutant == Some(ModelMutant::StaleCacheEntry) {
                    self.primary[id as usize] = None;
                } else {
                    self.evict_cached_block(id);
                }
            }
            self.ref_cnt[id as usize] = 1;
            out.push(id);
        }
        Ok(out)
    }

    /// `_maybe_evict_cached_block`: drop every key of the block (lazy eviction).
    pub fn evict_cached_block(&mut self, id: u32) -> bool {
        let mut keys: Vec<BlockKey> = Vec::new();
        if let Some(tag) = self.primary[id as usize].take() {
            keys.push(tag.key);
        }
        if let Some(s) = self.secondary.remove(&id) {
            keys.extend(s);
        }
        let mut removed = false;
        for key in keys {
            removed |= self.pop_key(key, id);
        }
        removed
    }

    fn pop_key(&mut self, key: BlockKey, id: u32) -> bool {
        let Some(ids) = self.cached.get_mut(&key) else {
            return false;
        };
        let Some(pos) = ids.iter().position(|&b| b == id) else {
            return false;
        };
        ids.remove(pos);
        if ids.is_empty() {
            self.cached.remove(&key);
        }
        true
    }

    /// `touch`: adopt hit blocks; ref-0 blocks leave the free queue.
    pub fn touch(&mut self, blocks: &[u32]) {
        for &b in blocks {
            if b == NULL_BLOCK {
                continue;
            }
            if self.ref_cnt[b as usize] == 0 && self.mutant != Some(ModelMutant::TouchKeepsFreeQueue) {
                self.free.remove(b);
            }
            if self.mutant != Some(ModelMutant::TouchForgetsRef) {
                self.ref_cnt[b as usize] += 1;
            }
        }
    }

    /// `free_blocks`: blocks reaching ref 0 go to the front if unhashed (LIFO reuse)
    /// or to the back if hashed (LRU), each list in iteration order (§1.5).
    pub fn free_blocks(&mut self, ordered: impl IntoIterator<Item = u32>) {
        let mut first = Vec::new();
        let mut last = Vec::new();
        for b in ordered {
            if b == NULL_BLOCK {
                continue;
            }
            let r = &mut self.ref_cnt[b as usize];
            *r = r.saturating_sub(1);
            if *r == 0 && self.mutant != Some(ModelMutant::LeakOnFree) {
                if self.primary[b as usize].is_none() || !self.enable_caching {
                    first.push(b);
                } else {
                    last.push(b);
                }
            }
        }
        self.free.prepend(&first);
        self.free.append(&last);
    }

    /// Add a reference without touching the queue (copy-on-write retention).
    pub fn retain(&mut self, b: u32) {
        if self.ref_cnt[b as usize] == 0 {
            self.free.remove(b);
        }
        self.ref_cnt[b as usize] += 1;
    }

    /// `_insert_block_hash`: primary if the block has none, else a secondary key.
    pub fn insert_block_hash(&mut self, key: BlockKey, id: u32, num_tokens: u64) {
        if self.primary[id as usize].map(|t| t.key) == Some(key) {
            return;
        }
        if self.cached.get(&key).is_some_and(|v| v.contains(&id)) {
            return;
        }
        match self.primary[id as usize] {
            None => self.primary[id as usize] = Some(BlockHashTag { key, num_tokens }),
            Some(_) => {
                let s = self.secondary.entry(id).or_default();
                if !s.contains(&key) {
                    s.push(key);
                }
            }
        }
        self.cached.entry(key).or_default().push(id);
    }

    /// `cache_full_blocks` for one block: a block that already has a (shorter,
    /// partial) key loses it first (§1.5 step 4).
    pub fn cache_full_block(&mut self, key: BlockKey, id: u32, num_tokens: u64) -> Result<(), PoolError> {
        if let Some(tag) = self.primary[id as usize] {
            if tag.num_tokens >= num_tokens {
                return Err(PoolError {
                    kind: "AssertionError",
                    message: format!("block {id} already hashed over {} tokens", tag.num_tokens),
                });
            }
            self.evict_cached_block(id);
        }
        self.insert_block_hash(key, id, num_tokens);
        Ok(())
    }

    /// `cache_partial_block` (without replace): registers a prefix entry ending
    /// inside a block, dropping a strictly shorter primary first.
    pub fn cache_partial_block(&mut self, key: BlockKey, id: u32, num_tokens: u64) {
        if id == NULL_BLOCK {
            return;
        }
        let already = self.primary[id as usize].map(|t| t.key) == Some(key)
            || self.cached.get(&key).is_some_and(|v| v.contains(&id));
        if !already {
            if let Some(tag) = self.primary[id as usize] {
                if tag.num_tokens < num_tokens {
                    self.evict_cached_block(id);
                }
            }
        }
        self.insert_block_hash(key, id, num_tokens);
    }

    /// `reset_prefix_cache`: refused while any non-null block is referenced;
    /// on success every hash is dropped and the queue order is unchanged.
    pub fn reset_prefix_cache(&mut self) -> bool {
        if self.free.len() != self.num_blocks as usize - 1 {
            return false;
        }
        self.cached.clear();
        self.secondary.clear();
        self.primary.iter_mut().for_each(|p| *p = None);
        true
    }

    /// `get_usage`: fraction of usable blocks in use.
    pub fn usage(&self) -> f64 {
        let usable = self.num_blocks as usize - 1;
        if usable == 0 {
            0.0
        } else {
            1.0 - self.free.len() as f64 / usable as f64
        }
    }

    /// Whether block `id` holds `key` (primary or secondary); allocation-free.
    pub fn holds_key(&self, id: u32, key: &BlockKey) -> bool {
        self.primary[id as usize].is_some_and(|t| t.key == *key)
            || self.secondary.get(&id).is_some_and(|s| s.contains(key))
    }

    /// Visit every map entry in unspecified order (callers must not let the order
    /// reach output; see `cache_entries` for a sorted copy).
    pub fn for_each_entry(&self, mut f: impl FnMut(&BlockKey, &[u32])) {
        for (k, ids) in &self.cached {
            f(k, ids);
        }
    }

    /// Visit every secondary key of every block, in unspecified order.
    pub fn for_each_secondary(&self, mut f: impl FnMut(u32, &BlockKey)) {
        for (b, keys) in &self.secondary {
            keys.iter().for_each(|k| f(*b, k));
        }
    }

    /// Every key in the map with its block ids (for invariant checks; sorted).
    pub fn cache_entries(&self) -> Vec<(BlockKey, Vec<u32>)> {
        let mut v: Vec<_> = self.cached.iter().map(|(k, ids)| (*k, ids.clone())).collect();
        v.sort();
        v
    }

    /// Secondary keys per block (for invariant checks; sorted).
    pub fn secondary_entries(&self) -> Vec<(u32, Vec<BlockKey>)> {
        let mut v: Vec<_> = self.secondary.iter().map(|(b, k)| (*b, k.clone())).collect();
        v.sort();
        v
    }

    /// Test-only corruption hook used to show invariant checks can fail.
    #[doc(hidden)]
    pub fn corrupt_ref_cnt(&mut self, id: u32, value: u32) {
        self.ref_cnt[id as usize] = value;
    }

    /// Test-only corruption hook: link a block into the free queue regardless of state.
    #[doc(hidden)]
    pub fn corrupt_push_free(&mut self, id: u32) {
        if !self.free.contains(id) {
            self.free.push_back(id);
        }
    }

    /// Test-only corruption hook: register a key for a block without tagging the block.
    #[doc(hidden)]
    pub fn corrupt_insert_key(&mut self, key: BlockKey, id: u32) {
        self.cached.entry(key).or_default().push(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_block_is_never_free_and_allocation_follows_queue_order() {
        let mut p = BlockPool::new(5, true);
        assert_eq!(p.free_queue().collect::<Vec<_>>(), [1, 2, 3, 4]);
        assert_eq!(p.get_new_blocks(2).unwrap(), [1, 2]);
        assert!(p.get_new_blocks(3).is_err());
    }

    #[test]
    fn unhashed_frees_go_front_hashed_go_back() {
        let mut p = BlockPool::new(6, true);
        let b = p.get_new_blocks(3).unwrap();
        let key = BlockKey { hash: 7, group: 0 };
        p.insert_block_hash(key, b[0], 4);
        p.free_blocks([b[2], b[1], b[0]]);
        assert_eq!(p.free_queue().collect::<Vec<_>>(), [3, 2, 4, 5, 1]);
        assert_eq!(p.cached_block_ids().collect::<Vec<_>>(), [1], "lazy eviction");
        assert!(p.reset_prefix_cache());
        assert_eq!(p.num_cached_keys(), 0);
    }
}
