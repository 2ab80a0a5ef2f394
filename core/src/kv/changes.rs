//! What changed in the pool and the tables since a watcher last looked: the input of the
//! incremental model invariants (`invariants::watch`). Off unless a watcher turns it on, so
//! the conformance runs and the exhaustive search pay nothing for it.
//!
//! The log sits at the lowest mutation points (the pool's ref counts, queue links and keys;
//! the tables' mutable accessors), so a bug in the logic above them is still logged.

use super::hash::BlockKey;
use super::request::ReqId;

/// The pool's side of the log.
#[derive(Debug, Default)]
pub struct PoolChanges {
    enabled: bool,
    /// Blocks whose ref count, free-queue membership or keys changed, each once.
    blocks: Vec<u32>,
    /// One bit per block: already in `blocks`.
    marked: Vec<u64>,
    /// Keys whose map entry changed or that a block gained or lost (repeats allowed).
    keys: Vec<BlockKey>,
}

reuse_clone!(PoolChanges {
    enabled,
    blocks,
    marked,
    keys
});

impl PoolChanges {
    pub(crate) fn enable(&mut self, num_blocks: u32) {
        self.enabled = true;
        self.marked = vec![0; (num_blocks as usize).div_ceil(64)];
    }

    pub(crate) fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Inlined up to the test: off, as in every replay, it costs a branch.
    #[inline(always)]
    pub(crate) fn block(&mut self, id: u32) {
        if self.enabled {
            self.log_block(id);
        }
    }

    #[inline(never)]
    fn log_block(&mut self, id: u32) {
        let (w, bit) = (id as usize / 64, 1u64 << (id % 64));
        if self.marked[w] & bit == 0 {
            self.marked[w] |= bit;
            self.blocks.push(id);
        }
    }

    #[inline(always)]
    pub(crate) fn key(&mut self, key: BlockKey) {
        if self.enabled {
            self.keys.push(key);
        }
    }

    /// Hand the log over and start a new one (the bitmap is cleared where it was set).
    fn take(&mut self) -> (Vec<u32>, Vec<BlockKey>) {
        for &b in &self.blocks {
            self.marked[b as usize / 64] &= !(1u64 << (b % 64));
        }
        (std::mem::take(&mut self.blocks), std::mem::take(&mut self.keys))
    }
}

/// The tables' side of the log: (group, request) whose table may have changed.
#[derive(Debug, Default)]
pub struct TableChanges {
    enabled: bool,
    tables: Vec<(u32, ReqId)>,
}

reuse_clone!(TableChanges { enabled, tables });

impl TableChanges {
    pub(crate) fn enable(&mut self) {
        self.enabled = true;
    }

    #[inline]
    pub(crate) fn table(&mut self, group: u32, req: ReqId) {
        if self.enabled {
            self.tables.push((group, req));
        }
    }
}

/// Everything the model changed since the last look.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelChanges {
    /// Blocks whose ref count, free-queue membership or keys changed (repeats only after
    /// a merge).
    pub blocks: Vec<u32>,
    /// Keys whose map entry or holders changed.
    pub keys: Vec<BlockKey>,
    /// (group, request) whose table may have changed, sorted, each once.
    pub tables: Vec<(u32, ReqId)>,
}

impl ModelChanges {
    /// Nothing changed.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.keys.is_empty() && self.tables.is_empty()
    }

    /// Add `other`'s changes to these.
    pub fn merge(&mut self, other: ModelChanges) {
        if other.is_empty() {
            return;
        }
        self.blocks.extend(other.blocks);
        self.keys.extend(other.keys);
        self.tables.extend(other.tables);
        self.tables.sort_unstable();
        self.tables.dedup();
    }
}

/// Drain both sides into one `ModelChanges`.
pub(crate) fn drain(pool: &mut PoolChanges, tables: &mut TableChanges) -> ModelChanges {
    let (blocks, keys) = pool.take();
    let mut out = ModelChanges {
        blocks,
        keys,
        tables: std::mem::take(&mut tables.tables),
    };
    out.tables.sort_unstable();
    out.tables.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::ModelChanges;
    use crate::kv::hash::BlockKey;

    #[test]
    fn merge_keeps_both_sides_with_tables_once() {
        let key = BlockKey { hash: 7, group: 0 };
        let mut a = ModelChanges {
            blocks: vec![1],
            keys: vec![],
            tables: vec![(0, 2)],
        };
        a.merge(ModelChanges {
            blocks: vec![3],
            keys: vec![key],
            tables: vec![(0, 2), (1, 1)],
        });
        assert_eq!(a.blocks, [1, 3]);
        assert_eq!(a.keys, [key]);
        assert_eq!(a.tables, [(0, 2), (1, 1)]);
        a.merge(ModelChanges::default());
        assert_eq!(a.blocks, [1, 3]);
    }
}
