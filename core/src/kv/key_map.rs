//! The prefix-cache map (`BlockHashToBlockMap`): key → the blocks cached under it, as an
//! open-addressing table of its own. A key is a uniformly random digest already, so a
//! slot's home is the digest's low bits (the group mixed in) and a probe walks the next
//! slots until the key or an empty slot (linear probing, at most half full). A lookup is
//! then one slot's compares where the general map hashed the key again and matched a
//! group of control bytes; caching a block writes one slot.
//!
//! Removal moves later slots of the run back (backward-shift deletion), so no tombstone
//! is left and a run ends at the first empty slot. `clear` (every `reset_prefix_cache`)
//! does not visit the slots: each slot carries the generation that filled it, and a slot
//! of an older generation is empty.
//!
//! Entries are never iterated where the order could show (`BlockPool::for_each_entry`'s
//! callers sort or fold them).

use super::hash::{BlockHash, BlockKey};
use super::key_blocks::KeyBlocks;

/// One slot: a key, the generation that filled it (empty unless it is the map's) and the
/// key's blocks.
#[derive(Clone)]
struct Slot {
    hash: BlockHash,
    group: u32,
    gen: u32,
    blocks: KeyBlocks,
}

/// Generation of a slot emptied by a removal; the map's generation is never 0.
const EMPTY_GEN: u32 = 0;

const EMPTY: Slot = Slot {
    hash: 0,
    group: 0,
    gen: EMPTY_GEN,
    blocks: KeyBlocks::EMPTY,
};

/// The fewest slots a table that holds any key has.
const MIN_SLOTS: usize = 16;

/// Blocks by prefix-cache key (duplicates allowed: `KeyBlocks`), at most half full.
pub struct KeyMap {
    /// A power of two slots (or none before the first key).
    slots: Vec<Slot>,
    len: usize,
    /// The generation whose slots are full.
    gen: u32,
}

impl Default for KeyMap {
    fn default() -> Self {
        KeyMap {
            slots: Vec::new(),
            len: 0,
            gen: 1,
        }
    }
}

impl Clone for KeyMap {
    fn clone(&self) -> Self {
        KeyMap {
            slots: self.slots.clone(),
            len: self.len,
            gen: self.gen,
        }
    }

    fn clone_from(&mut self, source: &Self) {
        self.slots.clone_from(&source.slots);
        (self.len, self.gen) = (source.len, source.gen);
    }
}

impl std::fmt::Debug for KeyMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(k, b)| (k, b.as_slice())))
            .finish()
    }
}

/// The slot a key probes first, of a table of `mask + 1` slots.
#[inline(always)]
fn home(hash: BlockHash, group: u32, mask: usize) -> usize {
    (hash as u64 ^ u64::from(group).wrapping_mul(0x9E37_79B9_7F4A_7C15)) as usize & mask
}

impl KeyMap {
    /// Keys in the map.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// No key in the map.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where `key` is (`Ok`), or the empty slot where it would go (`Err`, for
    /// `insert_vacant`; meaningless while the table has no slots).
    #[inline(always)]
    pub fn find(&self, key: &BlockKey) -> Result<usize, usize> {
        let n = self.slots.len();
        if n == 0 {
            return Err(0);
        }
        let mask = n - 1;
        let mut i = home(key.hash, key.group, mask);
        loop {
            let s = &self.slots[i];
            if s.gen != self.gen {
                return Err(i);
            }
            if s.hash == key.hash && s.group == key.group {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The blocks cached under `key`.
    #[inline(always)]
    pub fn get(&self, key: &BlockKey) -> Option<&KeyBlocks> {
        self.find(key).ok().map(|i| &self.slots[i].blocks)
    }

    /// The blocks of the key `find` found at `at`.
    #[inline(always)]
    pub fn blocks_mut(&mut self, at: usize) -> &mut KeyBlocks {
        &mut self.slots[at].blocks
    }

    /// Add `key` (absent: `find` returned `Err(at)`, and the map has not changed since).
    #[inline(always)]
    pub fn insert_vacant(&mut self, at: usize, key: BlockKey, blocks: KeyBlocks) {
        // At most half full after the insert (an empty table has no room either).
        let at = if self.len >= self.slots.len() / 2 {
            self.grow();
            self.find(&key).expect_err("a new key")
        } else {
            at
        };
        self.slots[at] = Slot {
            hash: key.hash,
            group: key.group,
            gen: self.gen,
            blocks,
        };
        self.len += 1;
    }

    /// Twice the slots (at least `MIN_SLOTS`), every key placed again.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let n = (self.slots.len() * 2).max(MIN_SLOTS);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; n]);
        let (gen, mask) = (self.gen, n - 1);
        for s in old.into_iter().filter(|s| s.gen == gen) {
            let mut i = home(s.hash, s.group, mask);
            while self.slots[i].gen == gen {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }

    /// Remove the key `find` found at `at`: later slots of its run move back, so that
    /// every key stays reachable from its home without passing an empty slot.
    #[inline]
    pub fn remove_at(&mut self, at: usize) {
        let (gen, mask) = (self.gen, self.slots.len() - 1);
        let mut hole = at;
        let mut j = at;
        loop {
            j = (j + 1) & mask;
            let s = &self.slots[j];
            if s.gen != gen {
                break;
            }
            // The key at j may fill the hole unless its home lies after the hole (up to j).
            let from_home = j.wrapping_sub(home(s.hash, s.group, mask)) & mask;
            if from_home >= (j.wrapping_sub(hole) & mask) {
                self.slots.swap(hole, j);
                hole = j;
            }
        }
        // Its blocks stay until a key fills the slot (an empty slot's are never read).
        self.slots[hole].gen = EMPTY_GEN;
        self.len -= 1;
    }

    /// Remove every key (the slots stay): a new generation, visiting no slot.
    pub fn clear(&mut self) {
        if self.len == 0 {
            return;
        }
        self.len = 0;
        self.gen = self.gen.wrapping_add(1);
        if self.gen == EMPTY_GEN {
            // 2^32 - 1 clears: the old generations' slots are emptied for real.
            self.slots.iter_mut().for_each(|s| *s = EMPTY);
            self.gen = 1;
        }
    }

    /// Every key with its blocks, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (BlockKey, &KeyBlocks)> + '_ {
        self.slots.iter().filter(|s| s.gen == self.gen).map(|s| {
            (
                BlockKey {
                    hash: s.hash,
                    group: s.group,
                },
                &s.blocks,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Keys that share homes: small hashes, and hashes equal modulo every table size.
    fn key(i: u64) -> BlockKey {
        BlockKey {
            hash: if i.is_multiple_of(3) {
                u128::from(i)
            } else {
                u128::from(i % 5) << 64 | u128::from(i % 7) << 20
            },
            group: (i % 4) as u32,
        }
    }

    fn insert(m: &mut KeyMap, k: BlockKey, id: u32) {
        match m.find(&k) {
            Ok(at) => m.blocks_mut(at).push(id),
            Err(at) => m.insert_vacant(at, k, KeyBlocks::one(id)),
        }
    }

    fn contents(m: &KeyMap) -> Vec<(BlockKey, Vec<u32>)> {
        let mut v: Vec<_> = m.iter().map(|(k, b)| (k, b.as_slice().to_vec())).collect();
        v.sort();
        v
    }

    /// A seeded random mix of inserts, removals and clears agrees with a `HashMap`
    /// after every step, every key looked up.
    #[test]
    fn behaves_like_a_hash_map_through_inserts_removals_and_clears() {
        let (mut m, mut reference) = (KeyMap::default(), HashMap::<BlockKey, Vec<u32>>::new());
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for step in 0..40_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = key(x % 97);
            match x >> 60 {
                0 if step % 7 == 0 => {
                    m.clear();
                    reference.clear();
                }
                0..=8 => {
                    insert(&mut m, k, step);
                    reference.entry(k).or_default().push(step);
                }
                _ => {
                    if let Ok(at) = m.find(&k) {
                        m.remove_at(at);
                    }
                    reference.remove(&k);
                }
            }
            assert_eq!(m.len(), reference.len(), "step {step}");
            for i in 0..97 {
                let k = key(i);
                assert_eq!(
                    m.get(&k).map(|b| b.as_slice().to_vec()),
                    reference.get(&k).cloned(),
                    "step {step} key {i}"
                );
            }
        }
        let mut want: Vec<_> = reference.into_iter().collect();
        want.sort();
        assert_eq!(contents(&m), want);
        let mut copy = KeyMap::default();
        insert(&mut copy, key(1), 1);
        copy.clone_from(&m);
        assert_eq!(contents(&copy), contents(&m), "a copy holds the same keys");
        assert_eq!(contents(&m.clone()), contents(&m));
    }

    #[test]
    fn a_clear_empties_the_map_and_a_wrapped_generation_too() {
        let mut m = KeyMap::default();
        insert(&mut m, key(3), 1);
        m.gen = u32::MAX;
        m.slots
            .iter_mut()
            .filter(|s| s.gen != EMPTY_GEN)
            .for_each(|s| s.gen = u32::MAX);
        m.clear();
        assert_eq!((m.len(), m.gen, m.get(&key(3)).is_none()), (0, 1, true));
        assert!(
            m.slots.iter().all(|s| s.gen == EMPTY_GEN),
            "every slot emptied for real"
        );
        insert(&mut m, key(3), 2);
        m.clear();
        assert!(m.is_empty() && m.get(&key(3)).is_none() && m.iter().next().is_none());
    }
}
