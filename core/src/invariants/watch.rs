//! The model invariants, incrementally: after an op, look only at what it changed (the blocks
//! whose ref count, free-queue membership or keys changed, the keys that gained or lost a
//! block, the tables it touched, the references held outside tables). The look keeps its own
//! count of each block's holders, updated from table diffs, so KV-REF is still checked against
//! the tables and not against the pool's own arithmetic.
//!
//! The look is a filter, not a second checker: whenever it sees anything wrong, and at the
//! executor's checkpoints, the full scan (`model::check_model`) runs and gives the verdict, so
//! a report is the full scan's byte for byte. A block the look missed because the change log
//! lacked it is still caught at the next checkpoint; `tests/tests/incremental_model.rs` shows
//! that every mutant is caught at the same op as by the full scan after every op.

use super::model::check_model;
use super::Violation;
use crate::kv::changes::ModelChanges;
use crate::kv::hash::FastMap;
use crate::kv::{KvCacheManager, ReqId, NULL_BLOCK};

/// One rank's incremental watch over its KV model.
#[derive(Clone, Debug)]
pub struct ModelWatch {
    /// Table entries and outside references per block, as of the last look.
    holders: Vec<u32>,
    /// The tables as of the last look, by (group, request).
    tables: FastMap<(u32, ReqId), Vec<u32>>,
    /// Outside references as of the last look, sorted.
    retained: Vec<u32>,
    /// One bit per block: ref count > 0 at the last look.
    referenced_bits: Vec<u64>,
    referenced: usize,
    /// Per block: the pass that last visited it (deduplication without clearing).
    visited: Vec<u32>,
    pass: u32,
    suspects: Vec<u32>,
    scratch: Vec<u32>,
}

impl ModelWatch {
    /// Start watching `kv` (this turns its change log on); `retained` as for `check_model`.
    pub fn new(kv: &mut KvCacheManager, retained: &[u32]) -> Self {
        kv.watch_changes();
        kv.take_changes();
        let n = kv.pool.num_blocks() as usize;
        let mut w = ModelWatch {
            holders: vec![0; n],
            tables: FastMap::default(),
            retained: Vec::new(),
            referenced_bits: vec![0; n.div_ceil(64)],
            referenced: 0,
            visited: vec![0; n],
            pass: 0,
            suspects: Vec::new(),
            scratch: Vec::new(),
        };
        w.resync(kv, retained);
        w
    }

    /// The invariants after an op that made `changes`: empty when all hold.
    pub fn check(&mut self, kv: &KvCacheManager, retained: &[u32], changes: &ModelChanges) -> Vec<Violation> {
        if !self.looks_clean(kv, retained, changes) {
            return self.full(kv, retained);
        }
        Vec::new()
    }

    /// The full scan (a checkpoint), after which the watch starts again from the model.
    pub fn full(&mut self, kv: &KvCacheManager, retained: &[u32]) -> Vec<Violation> {
        let v = check_model(kv, retained);
        self.resync(kv, retained);
        v
    }

    /// Rebuild every count from the model itself.
    fn resync(&mut self, kv: &KvCacheManager, retained: &[u32]) {
        self.holders.iter_mut().for_each(|h| *h = 0);
        self.tables.clear();
        for (g, m) in kv.groups.iter().enumerate() {
            for req in kv.request_ids(g) {
                let t = kv.table(g, req);
                for &b in t.iter().filter(|&&b| b != NULL_BLOCK) {
                    self.holders[b as usize] += 1;
                }
                self.tables.insert((m.group_id, req), t.to_vec());
            }
        }
        self.retained = sorted(retained);
        for &b in &self.retained {
            self.holders[b as usize] += 1;
        }
        self.referenced_bits.iter_mut().for_each(|w| *w = 0);
        self.referenced = 0;
        for b in 1..kv.pool.num_blocks() {
            if kv.pool.ref_cnt(b) > 0 {
                self.referenced_bits[b as usize / 64] |= 1 << (b % 64);
                self.referenced += 1;
            }
        }
    }

    fn next_pass(&mut self) -> u32 {
        self.pass = self.pass.wrapping_add(1);
        if self.pass == 0 {
            self.visited.iter_mut().for_each(|v| *v = 0);
            self.pass = 1;
        }
        self.pass
    }

    /// Apply the changes to the watch's counts and look at everything they touched; false
    /// as soon as anything looks wrong.
    fn looks_clean(&mut self, kv: &KvCacheManager, retained: &[u32], changes: &ModelChanges) -> bool {
        self.suspects.clear();
        for &(g, req) in &changes.tables {
            if !self.diff_table(kv, g, req) {
                return false;
            }
        }
        if !self.diff_retained(retained) {
            return false;
        }
        let pass = self.next_pass();
        let pool = &kv.pool;
        let suspects = std::mem::take(&mut self.suspects);
        let mut ok = true;
        for &b in suspects.iter().chain(&changes.blocks) {
            if b == NULL_BLOCK || self.visited[b as usize] == pass {
                continue;
            }
            self.visited[b as usize] = pass;
            let r = pool.ref_cnt(b);
            ok &= r == self.holders[b as usize] && pool.in_free_queue(b) == (r == 0);
            ok &= pool
                .block_hash(b)
                .is_none_or(|t| pool.blocks_for_key(&t.key).contains(&b));
            ok &= pool
                .secondary_keys(b)
                .iter()
                .all(|k| pool.blocks_for_key(k).contains(&b));
            let (w, bit) = (b as usize / 64, 1u64 << (b % 64));
            let was = self.referenced_bits[w] & bit != 0;
            if was != (r > 0) {
                self.referenced_bits[w] ^= bit;
                if was {
                    self.referenced -= 1;
                } else {
                    self.referenced += 1;
                }
            }
        }
        self.suspects = suspects;
        ok &= changes
            .keys
            .iter()
            .all(|k| pool.blocks_for_key(k).iter().all(|&id| pool.holds_key(id, k)));
        ok &= self.referenced + pool.num_free_blocks() == pool.num_blocks() as usize - 1;
        ok &= !pool.in_free_queue(NULL_BLOCK) && pool.ref_cnt(NULL_BLOCK) == 0 && pool.block_hash(NULL_BLOCK).is_none();
        ok
    }

    /// Bring one table's snapshot up to date, moving holder counts for the entries that
    /// changed; false if the new table holds a block twice (or the counts went wrong).
    fn diff_table(&mut self, kv: &KvCacheManager, g: u32, req: ReqId) -> bool {
        let now = kv.table(g as usize, req);
        let mut old = self.tables.remove(&(g, req)).unwrap_or_default();
        let mut changed = false;
        for i in 0..old.len().max(now.len()) {
            let (a, b) = (
                old.get(i).copied().unwrap_or(NULL_BLOCK),
                now.get(i).copied().unwrap_or(NULL_BLOCK),
            );
            if a == b {
                continue;
            }
            if a != NULL_BLOCK {
                let h = &mut self.holders[a as usize];
                let Some(dec) = h.checked_sub(1) else { return false };
                *h = dec;
                self.suspects.push(a);
            }
            if b != NULL_BLOCK {
                self.holders[b as usize] += 1;
                self.suspects.push(b);
                changed = true;
            }
        }
        if changed && !self.no_repeats(now) {
            return false;
        }
        if !now.is_empty() {
            old.clear();
            old.extend_from_slice(now);
            self.tables.insert((g, req), old);
        }
        true
    }

    /// No non-null block appears twice in `table`.
    fn no_repeats(&mut self, table: &[u32]) -> bool {
        let pass = self.next_pass();
        for &b in table.iter().filter(|&&b| b != NULL_BLOCK) {
            if self.visited[b as usize] == pass {
                return false;
            }
            self.visited[b as usize] = pass;
        }
        true
    }

    /// Move holder counts for the outside references that came and went.
    fn diff_retained(&mut self, retained: &[u32]) -> bool {
        let mut now = std::mem::take(&mut self.scratch);
        now.clear();
        now.extend_from_slice(retained);
        now.sort_unstable();
        if now == self.retained {
            self.scratch = now;
            return true;
        }
        let (mut i, mut j) = (0, 0);
        while i < self.retained.len() || j < now.len() {
            let (a, b) = (self.retained.get(i), now.get(j));
            match (a, b) {
                (Some(&x), Some(&y)) if x == y => {
                    i += 1;
                    j += 1;
                }
                (Some(&x), y) if y.is_none_or(|&y| x < y) => {
                    let h = &mut self.holders[x as usize];
                    let Some(dec) = h.checked_sub(1) else { return false };
                    *h = dec;
                    self.suspects.push(x);
                    i += 1;
                }
                (_, Some(&y)) => {
                    self.holders[y as usize] += 1;
                    self.suspects.push(y);
                    j += 1;
                }
                _ => unreachable!("one side has an element"),
            }
        }
        self.scratch = std::mem::replace(&mut self.retained, now);
        true
    }
}

fn sorted(xs: &[u32]) -> Vec<u32> {
    let mut v = xs.to_vec();
    v.sort_unstable();
    v
}
