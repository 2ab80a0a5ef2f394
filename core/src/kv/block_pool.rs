//! vLLM's `BlockPool` (vllm_kv.md §1): ref counts, the free queue, the prefix-cache
//! map keyed by (hash, group) with duplicates, lazy eviction, and the reset.

use super::bump;
use super::changes::PoolChanges;
use super::free_queue::FreeQueue;
use super::hash::{BlockKey, FastMap};
use super::key_blocks::KeyBlocks;
use super::key_map::KeyMap;
use super::mutant::ModelMutant;

/// Block 0 is the null block: a table placeholder, never handed out or cached.
pub const NULL_BLOCK: u32 = 0;

/// A block's primary prefix-cache key and the prefix length it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockHashTag {
    /// The (hash, group) key.
    pub key: BlockKey,
    /// Tokens of the prefix the hash covers.
    pub num_tokens: u64,
}

/// A block's primary key and the prefix length it covers, by block id (`BlockPool::primary`):
/// one entry, so reading or writing a block's key checks one index, not three. What
/// [`BlockHashTag`] holds, laid out flat: the group and the count share the 16-byte-aligned
/// key's padding, 32 bytes an entry where a `BlockHashTag` takes 48.
#[derive(Clone, Copy, Debug, Default)]
struct Primary {
    hash: u128,
    group: u32,
    tokens: u64,
}

impl Primary {
    #[inline(always)]
    fn of(key: BlockKey, tokens: u64) -> Self {
        Primary {
            hash: key.hash,
            group: key.group,
            tokens,
        }
    }
}

/// The pool's internal consistency was violated (a model bug, never user input).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct PoolError {
    /// The Python exception vLLM would raise here (e.g. `ValueError`, `AssertionError`).
    pub kind: &'static str,
    /// What broke.
    pub message: String,
}

/// vLLM's `BlockPool`: every block of one rank, the free queue in eviction order, ref counts and the prefix-cache map (lazy eviction, duplicate keys allowed; vllm_kv.md §1).
#[derive(Debug)]
pub struct BlockPool {
    num_blocks: u32,
    enable_caching: bool,
    ref_cnt: Vec<u32>,
    /// Each block's primary key and token count, by block id (valid where the block's
    /// `hashed` bit is set).
    primary: Vec<Primary>,
    /// One bit per block: set iff it has a primary key (observations list these ids).
    hashed: Vec<u64>,
    /// Secondary keys of blocks that already have a primary (`cached_block_hashes_by_block`),
    /// by block id; rare, so kept sparse (a pool's cost follows its use, not its size).
    secondary: FastMap<u32, Vec<BlockKey>>,
    /// Key → block ids in insertion order; the first is what lookups return.
    cached: KeyMap,
    /// Bumped by every change to the keys or the hashed blocks (what observations
    /// show of the cache), so that observers re-render only then.
    hash_version: u64,
    free: FreeQueue,
    /// Reused buffer of `free_blocks` (the blocks it prepends).
    scratch: Vec<u32>,
    /// A deliberate bug, switched on only to show that invariant checks can fail.
    mutant: Option<ModelMutant>,
    /// Cached blocks evicted by allocations so far (a coverage goal).
    evictions: u64,
    /// What changed since a watcher last looked (off unless one asks).
    pub(crate) changes: PoolChanges,
}

reuse_clone!(BlockPool {
    num_blocks,
    enable_caching,
    ref_cnt,
    primary,
    hashed,
    secondary,
    cached,
    hash_version,
    free,
    scratch,
    mutant,
    evictions,
    changes
});

impl BlockPool {
    /// A pool of `num_blocks` blocks (block 0 the null block).
    pub fn new(num_blocks: u32, enable_caching: bool) -> Self {
        Self::with_mutant(num_blocks, enable_caching, None)
    }

    /// A pool with a deliberate bug (`ModelMutant`).
    pub fn with_mutant(num_blocks: u32, enable_caching: bool, mutant: Option<ModelMutant>) -> Self {
        let mut pool = BlockPool {
            num_blocks: 0,
            enable_caching,
            ref_cnt: Vec::new(),
            primary: Vec::new(),
            hashed: Vec::new(),
            secondary: FastMap::default(),
            // Grown as blocks are cached: presizing it to the pool made a 1M-block pool cost
            // tens of MB before its first op.
            cached: KeyMap::default(),
            hash_version: 0,
            free: FreeQueue::with_range(0, 0..0),
            scratch: Vec::new(),
            mutant,
            evictions: 0,
            changes: PoolChanges::default(),
        };
        pool.reset_to(num_blocks, enable_caching, mutant);
        pool
    }

    /// Become `with_mutant(num_blocks, enable_caching, mutant)`, reusing this pool's
    /// storage (a benchmark replaying many traces then allocates nothing per trace).
    pub fn reset_to(&mut self, num_blocks: u32, enable_caching: bool, mutant: Option<ModelMutant>) {
        // The null block is the first popleft of the fresh queue (§1.4 step 6).
        let first = if mutant == Some(ModelMutant::HandOutNullBlock) {
            0
        } else {
            1
        };
        let n = num_blocks as usize;
        self.free.reset_range(n, first..num_blocks);
        (self.num_blocks, self.enable_caching, self.mutant) = (num_blocks, enable_caching, mutant);
        fn zeroed<T: Copy + Default>(v: &mut Vec<T>, n: usize) {
            v.clear();
            v.resize(n, T::default());
        }
        zeroed(&mut self.ref_cnt, n);
        zeroed(&mut self.hashed, n.div_ceil(64));
        // Read only where a block's `hashed` bit is set, as after an eviction: what an
        // earlier model left in them is never seen.
        self.primary.resize(n, Primary::default());
        self.secondary.clear();
        self.cached.clear();
        self.hash_version = 0;
        self.scratch.clear();
        self.evictions = 0;
        self.changes = PoolChanges::default();
    }

    /// Blocks, the null block included.
    pub fn num_blocks(&self) -> u32 {
        self.num_blocks
    }

    /// Prefix caching on.
    pub fn enable_caching(&self) -> bool {
        self.enable_caching
    }

    /// Blocks in the free queue (cached ones with no holder included).
    #[inline]
    pub fn num_free_blocks(&self) -> usize {
        self.free.len()
    }

    /// The block's reference count.
    #[inline]
    pub fn ref_cnt(&self, id: u32) -> u32 {
        self.ref_cnt[id as usize]
    }

    /// The block's primary prefix-cache key, if it has one.
    #[inline]
    pub fn block_hash(&self, id: u32) -> Option<BlockHashTag> {
        let i = id as usize;
        (self.hashed[i / 64] & (1 << (i % 64)) != 0).then(|| {
            let p = self.primary[i];
            BlockHashTag {
                key: BlockKey {
                    hash: p.hash,
                    group: p.group,
                },
                num_tokens: p.tokens,
            }
        })
    }

    /// Whether the block has a primary key (its `hashed` bit), without reading the key.
    #[inline]
    fn is_hashed(&self, id: u32) -> bool {
        self.hashed[id as usize / 64] & (1 << (id % 64)) != 0
    }

    /// Whether the block is in the free queue.
    pub fn in_free_queue(&self, id: u32) -> bool {
        self.free.contains(id)
    }

    /// The free queue from the eviction head.
    pub fn free_queue(&self) -> impl Iterator<Item = u32> + '_ {
        self.free.iter()
    }

    /// The free queue from its back (the block evicted last first).
    pub fn free_queue_back(&self) -> impl Iterator<Item = u32> + '_ {
        self.free.iter_back()
    }

    /// Changes whenever the free queue does.
    pub fn free_version(&self) -> u64 {
        self.free.version()
    }

    /// Changes whenever the cache keys or the set of hashed blocks do.
    pub fn hash_version(&self) -> u64 {
        self.hash_version
    }

    /// Distinct keys in the prefix-cache map (`len(BlockHashToBlockMap)`).
    /// Cached blocks evicted by allocations so far.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Distinct keys in the prefix-cache map.
    pub fn num_cached_keys(&self) -> usize {
        self.cached.len()
    }

    /// Ascending ids of blocks that carry a prefix-cache hash.
    pub fn cached_block_ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.hashed.iter().enumerate().flat_map(|(w, &bits)| {
            let mut bits = bits;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    w as u32 * 64 + b
                })
            })
        })
    }

    /// Set or clear a block's primary key, keeping the `hashed` bits in step.
    fn set_primary(&mut self, id: u32, tag: Option<BlockHashTag>) {
        // Reading the old key costs a lookup per call: only a watcher needs it.
        if self.changes.is_enabled() {
            self.log_primary_change(id, tag);
        }
        let (w, bit) = (id as usize / 64, 1u64 << (id % 64));
        if tag.is_some() {
            self.hashed[w] |= bit;
        } else {
            self.hashed[w] &= !bit;
        }
        if let Some(t) = tag {
            let i = id as usize;
            self.primary[i] = Primary::of(t.key, t.num_tokens);
        }
        bump(&mut self.hash_version, 1);
    }

    /// The change log of `set_primary`: the block, its old key and its new one.
    fn log_primary_change(&mut self, id: u32, tag: Option<BlockHashTag>) {
        self.changes.block(id);
        if let Some(old) = self.block_hash(id) {
            self.changes.key(old.key);
        }
        if let Some(new) = tag {
            self.changes.key(new.key);
        }
    }

    /// Block ids registered under `key`, first-inserted first.
    pub fn blocks_for_key(&self, key: &BlockKey) -> &[u32] {
        self.cached.get(key).map_or(&[], KeyBlocks::as_slice)
    }

    /// The block's secondary keys (those beyond its primary).
    pub fn secondary_keys(&self, id: u32) -> &[BlockKey] {
        // Nearly always empty: no probe then.
        if self.secondary.is_empty() {
            return &[];
        }
        self.secondary.get(&id).map_or(&[], Vec::as_slice)
    }

    /// Every key that points at `id` (primary first, then secondaries).
    pub fn keys_of(&self, id: u32) -> Vec<BlockKey> {
        let mut keys: Vec<BlockKey> = self.block_hash(id).iter().map(|t| t.key).collect();
        keys.extend_from_slice(self.secondary_keys(id));
        keys
    }

    /// `get_cached_block`: one block per group, or `None` if any group misses (§1.5).
    pub fn get_cached_block(&self, hash: u128, groups: &[u32]) -> Option<Vec<u32>> {
        let mut out = vec![NULL_BLOCK; groups.len()];
        self.get_cached_block_into(hash, groups, &mut out).then_some(out)
    }

    /// The block a lookup of `key` returns (the first cached under it), if any.
    #[inline]
    pub fn cached_block(&self, key: &BlockKey) -> Option<u32> {
        self.cached.get(key).map(KeyBlocks::first)
    }

    /// `get_cached_block` into `out` (one slot per group); false if any group misses.
    #[inline]
    pub fn get_cached_block_into(&self, hash: u128, groups: &[u32], out: &mut [u32]) -> bool {
        for (&group, slot) in groups.iter().zip(out) {
            match self.cached.get(&BlockKey { hash, group }) {
                Some(ids) => *slot = ids.first(),
                None => return false,
            }
        }
        true
    }

    /// `get_new_blocks`: pop from the front, evict their cache entries, ref = 1.
    pub fn get_new_blocks(&mut self, n: usize) -> Result<Vec<u32>, PoolError> {
        let mut out = Vec::with_capacity(n);
        self.get_new_blocks_into(n, &mut out)?;
        Ok(out)
    }

    /// `get_new_blocks`, appending to `out` (untouched on error). Inlined into the
    /// groups' allocation loop, which draws a block on most calls.
    #[inline(always)]
    pub fn get_new_blocks_into(&mut self, n: usize, out: &mut Vec<u32>) -> Result<(), PoolError> {
        if n > self.free.len() {
            return Err(Self::cannot_get(n));
        }
        out.reserve(n);
        for _ in 0..n {
            let id = self.free.pop_front().expect("length checked above");
            self.changes.block(id);
            // Most drawn blocks hold no key: nothing to evict.
            if self.enable_caching && (self.has_keys(id) || self.mutant.is_some()) {
                self.drop_keys_of_drawn(id);
            }
            self.ref_cnt[id as usize] = 1;
            out.push(id);
        }
        Ok(())
    }

    #[cold]
    fn cannot_get(n: usize) -> PoolError {
        PoolError {
            kind: "ValueError",
            message: format!("Cannot get {n} free blocks from the pool"),
        }
    }

    /// A drawn block's keys go (lazy eviction), or with the stale-entry mutant only its tag.
    #[inline(never)]
    fn drop_keys_of_drawn(&mut self, id: u32) {
        if self.mutant == Some(ModelMutant::StaleCacheEntry) {
            self.set_primary(id, None);
        } else if self.has_keys(id) && self.evict_cached_block(id) {
            self.evictions += 1;
        }
    }

    /// Whether the block may hold a key (primary or secondary): most drawn blocks hold
    /// none, and evicting them would only log the block again.
    #[inline]
    fn has_keys(&self, id: u32) -> bool {
        self.is_hashed(id) || !self.secondary.is_empty()
    }

    /// `_maybe_evict_cached_block`: drop every key of the block (lazy eviction).
    /// Inlined into `drop_keys_of_drawn`, which half the drawn blocks reach.
    #[inline(always)]
    pub fn evict_cached_block(&mut self, id: u32) -> bool {
        self.changes.block(id);
        let mut removed = false;
        if let Some(tag) = self.block_hash(id) {
            if self.changes.is_enabled() {
                self.log_primary_change(id, None);
            }
            // `set_primary(id, None)`, inlined.
            self.hashed[id as usize / 64] &= !(1 << (id % 64));
            bump(&mut self.hash_version, 1);
            removed |= self.pop_key(tag.key, id);
        }
        // Secondary keys are rare: an empty map is not probed.
        if !self.secondary.is_empty() {
            if let Some(secondary) = self.secondary.remove(&id) {
                for key in secondary {
                    removed |= self.pop_key(key, id);
                }
            }
        }
        removed
    }

    #[inline(always)]
    fn pop_key(&mut self, key: BlockKey, id: u32) -> bool {
        // One probe finds the entry and, when its last block goes, removes it.
        let Ok(at) = self.cached.find(&key) else {
            return false;
        };
        let blocks = self.cached.blocks_mut(at);
        // Nearly always the key's only block.
        if blocks.is_only(id) {
            self.cached.remove_at(at);
        } else if !blocks.remove(id) {
            return false;
        } else if blocks.is_empty() {
            self.cached.remove_at(at);
        }
        self.changes.key(key);
        bump(&mut self.hash_version, 1);
        true
    }

    /// `touch`: adopt hit blocks; ref-0 blocks leave the free queue.
    pub fn touch(&mut self, blocks: &[u32]) {
        for &b in blocks {
            if b == NULL_BLOCK {
                continue;
            }
            self.changes.block(b);
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
        // The fields, not `self`'s methods: the list is borrowed from the pool.
        let BlockPool {
            scratch: unhashed,
            ref_cnt,
            hashed,
            enable_caching,
            mutant,
            changes,
            free,
            ..
        } = self;
        let leak = *mutant == Some(ModelMutant::LeakOnFree);
        for b in ordered {
            if b == NULL_BLOCK {
                continue;
            }
            changes.block(b);
            let r = &mut ref_cnt[b as usize];
            *r = r.saturating_sub(1);
            if *r == 0 && !leak {
                let is_hashed = hashed[b as usize / 64] & (1 << (b % 64)) != 0;
                if !is_hashed || !*enable_caching {
                    unhashed.push(b);
                } else {
                    // Appended as they come: the prepend below touches only the front,
                    // so the queue ends as vLLM's prepend-then-append leaves it.
                    free.push_back(b);
                }
            }
        }
        if !unhashed.is_empty() {
            free.prepend(unhashed);
            unhashed.clear();
        }
    }

    /// Add a reference without touching the queue (copy-on-write retention).
    pub fn retain(&mut self, b: u32) {
        self.changes.block(b);
        if self.ref_cnt[b as usize] == 0 {
            self.free.remove(b);
        }
        self.ref_cnt[b as usize] += 1;
    }

    /// `_insert_block_hash`: primary if the block has none, else a secondary key.
    pub fn insert_block_hash(&mut self, key: BlockKey, id: u32, num_tokens: u64) {
        if self.block_hash(id).map(|t| t.key) == Some(key) {
            return;
        }
        // One probe both checks for and registers the (key, block) entry.
        match self.cached.find(&key) {
            Ok(at) => {
                let blocks = self.cached.blocks_mut(at);
                if blocks.contains(id) {
                    return;
                }
                blocks.push(id);
            }
            Err(at) => self.cached.insert_vacant(at, key, KeyBlocks::one(id)),
        }
        bump(&mut self.hash_version, 1);
        self.changes.block(id);
        self.changes.key(key);
        match self.block_hash(id) {
            None => self.set_primary(id, Some(BlockHashTag { key, num_tokens })),
            Some(_) => {
                let s = self.secondary.entry(id).or_default();
                if !s.contains(&key) {
                    s.push(key);
                }
            }
        }
    }

    /// `cache_full_blocks` for one block: a block that already has a (shorter,
    /// partial) key loses it first (§1.5 step 4).
    #[inline]
    pub fn cache_full_block(&mut self, key: BlockKey, id: u32, num_tokens: u64) -> Result<(), PoolError> {
        if self.is_hashed(id) {
            self.unhash_shorter(id, num_tokens)?;
        }
        // The block has no primary now: `insert_block_hash` without its checks for one.
        match self.cached.find(&key) {
            Ok(at) => {
                let blocks = self.cached.blocks_mut(at);
                if blocks.contains(id) {
                    return Ok(());
                }
                blocks.push(id);
            }
            Err(at) => self.cached.insert_vacant(at, key, KeyBlocks::one(id)),
        }
        self.changes.block(id);
        self.changes.key(key);
        if self.changes.is_enabled() {
            self.log_primary_change(id, Some(BlockHashTag { key, num_tokens }));
        }
        // `set_primary(id, Some(..))`, inlined: the block has no primary.
        let i = id as usize;
        self.hashed[i / 64] |= 1 << (i % 64);
        self.primary[i] = Primary::of(key, num_tokens);
        // One bump each for the new entry and the new primary, as the steps they fold.
        bump(&mut self.hash_version, 2);
        Ok(())
    }

    /// `cache_full_block` of a block already hashed: its shorter (partial) key goes;
    /// one as long or longer is vLLM's assertion.
    #[cold]
    #[inline(never)]
    fn unhash_shorter(&mut self, id: u32, num_tokens: u64) -> Result<(), PoolError> {
        let tag = self.block_hash(id).expect("hashed");
        if tag.num_tokens >= num_tokens {
            return Err(PoolError {
                kind: "AssertionError",
                message: format!("block {id} already hashed over {} tokens", tag.num_tokens),
            });
        }
        self.evict_cached_block(id);
        Ok(())
    }

    /// `cache_partial_block` (without replace): registers a prefix entry ending
    /// inside a block, dropping a strictly shorter primary first.
    pub fn cache_partial_block(&mut self, key: BlockKey, id: u32, num_tokens: u64) {
        if id == NULL_BLOCK {
            return;
        }
        let already =
            self.block_hash(id).map(|t| t.key) == Some(key) || self.cached.get(&key).is_some_and(|v| v.contains(id));
        if !already {
            if let Some(tag) = self.block_hash(id) {
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
        if self.reset_refused() {
            return false;
        }
        self.reset_prefix_cache_unchecked()
    }

    /// `reset_prefix_cache` would be refused: some non-null block is referenced.
    pub fn reset_refused(&self) -> bool {
        self.free.len() != self.num_blocks as usize - 1
    }

    /// The reset without vLLM's refusal while blocks are in use (issue 19's slip only).
    pub(crate) fn reset_prefix_cache_unchecked(&mut self) -> bool {
        // Only hashed blocks have a primary: visiting them (not the pool) keeps a reset's
        // cost with the cache's size. A watcher sees exactly these blocks and keys change;
        // without one (every replay) there is nothing to log and no block is visited.
        if self.changes.is_enabled() {
            let hashed: Vec<u32> = self.cached_block_ids().collect();
            for id in hashed {
                if let Some(t) = self.block_hash(id) {
                    self.changes.key(t.key);
                }
                self.changes.block(id);
            }
            for (&id, keys) in &self.secondary {
                self.changes.block(id);
                keys.iter().for_each(|&k| self.changes.key(k));
            }
        }
        self.cached.clear();
        self.secondary.clear();
        self.hashed.iter_mut().for_each(|w| *w = 0);
        bump(&mut self.hash_version, 1);
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
        self.block_hash(id).is_some_and(|t| t.key == *key) || self.secondary_keys(id).contains(key)
    }

    /// Visit every map entry in unspecified order (callers must not let the order
    /// reach output; see `cache_entries` for a sorted copy).
    pub fn for_each_entry(&self, mut f: impl FnMut(&BlockKey, &[u32])) {
        for (k, ids) in self.cached.iter() {
            f(&k, ids.as_slice());
        }
    }

    /// Visit every secondary key of every block, in unspecified order.
    pub fn for_each_secondary(&self, mut f: impl FnMut(u32, &BlockKey)) {
        for (&b, keys) in &self.secondary {
            keys.iter().for_each(|k| f(b, k));
        }
    }

    /// Every key in the map with its block ids (for invariant checks; sorted).
    pub fn cache_entries(&self) -> Vec<(BlockKey, Vec<u32>)> {
        let mut v: Vec<_> = self
            .cached
            .iter()
            .map(|(k, ids)| (k, ids.as_slice().to_vec()))
            .collect();
        v.sort();
        v
    }

    /// Secondary keys per block (for invariant checks; sorted).
    pub fn secondary_entries(&self) -> Vec<(u32, Vec<BlockKey>)> {
        let mut v: Vec<_> = self
            .secondary
            .iter()
            .filter(|(_, k)| !k.is_empty())
            .map(|(&b, k)| (b, k.clone()))
            .collect();
        v.sort();
        v
    }

    /// Test-only corruption hook used to show invariant checks can fail.
    #[doc(hidden)]
    pub fn corrupt_ref_cnt(&mut self, id: u32, value: u32) {
        self.changes.block(id);
        self.ref_cnt[id as usize] = value;
    }

    /// Test-only corruption hook: link a block into the free queue regardless of state.
    #[doc(hidden)]
    pub fn corrupt_push_free(&mut self, id: u32) {
        self.changes.block(id);
        if !self.free.contains(id) {
            self.free.push_back(id);
        }
    }

    /// Test-only corruption hook: register a key for a block without tagging the block.
    #[doc(hidden)]
    pub fn corrupt_insert_key(&mut self, key: BlockKey, id: u32) {
        self.changes.key(key);
        match self.cached.find(&key) {
            Ok(at) => self.cached.blocks_mut(at).push(id),
            Err(at) => self.cached.insert_vacant(at, key, KeyBlocks::one(id)),
        }
        bump(&mut self.hash_version, 1);
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

    #[test]
    fn usage_is_the_used_share_of_the_usable_blocks() {
        let mut p = BlockPool::new(11, true);
        assert_eq!(p.usage(), 0.0);
        let b = p.get_new_blocks(4).unwrap();
        assert!((p.usage() - 0.4).abs() < 1e-12, "{}", p.usage());
        p.free_blocks(b);
        assert_eq!(p.usage(), 0.0);
    }

    #[test]
    fn retaining_a_free_block_takes_it_out_of_the_free_queue() {
        let mut p = BlockPool::new(4, true);
        let b = p.get_new_blocks(1).unwrap();
        p.free_blocks(b.clone());
        assert!(p.free_queue().any(|x| x == b[0]));
        p.retain(b[0]);
        assert_eq!(p.ref_cnt(b[0]), 1);
        assert!(!p.free_queue().any(|x| x == b[0]), "a retained block is in use");
        p.retain(b[0]);
        assert_eq!(p.ref_cnt(b[0]), 2);
        assert_eq!(p.free_queue().count(), 2);
    }

    #[test]
    fn a_longer_partial_entry_replaces_a_shorter_primary() {
        let mut p = BlockPool::new(4, true);
        let b = p.get_new_blocks(1).unwrap()[0];
        let short = BlockKey { hash: 1, group: 0 };
        let long = BlockKey { hash: 2, group: 0 };
        p.cache_partial_block(short, b, 2);
        p.cache_partial_block(long, b, 3);
        let tag = p.block_hash(b).unwrap();
        assert_eq!((tag.key, tag.num_tokens), (long, 3));
        assert_eq!(p.num_cached_keys(), 1, "the shorter entry is dropped");
        // Registering the same entry again changes nothing.
        p.cache_partial_block(long, b, 3);
        assert_eq!(p.num_cached_keys(), 1);
    }
}
