//! `find_longest_cache_hit` per kind (vllm_kv.md §3.3–3.6). Classmethods in vLLM:
//! they read only the pool and the request's hashes, never a manager's tables.

use crate::kv::block_pool::{BlockPool, NULL_BLOCK};
use crate::kv::hash::{BlockHash, BlockKey};
use crate::kv::spec::{GroupKind, GroupSpec};

/// The request's hashes viewed at `block_size` (§2.6): element i is the last fine
/// hash inside coarse block i.
struct HashView<'a> {
    hashes: &'a [BlockHash],
    scale: usize,
}

impl HashView<'_> {
    fn len(&self) -> usize {
        self.hashes.len() / self.scale
    }
    fn get(&self, i: usize) -> Option<BlockHash> {
        self.hashes.get((i + 1) * self.scale - 1).copied()
    }
}

/// Make `lists` `n` empty lists, keeping the storage of those it had.
#[inline]
pub fn empty_lists(lists: &mut Vec<Vec<u32>>, n: usize) {
    // Usually already `n` lists (the same model's last lookup): only clear them.
    if lists.len() != n {
        lists.truncate(n);
        lists.resize_with(n, Vec::new);
    }
    // One group (most models) without the unrolled loop's set-up.
    match lists.as_mut_slice() {
        [one] => one.clear(),
        all => all.iter_mut().for_each(Vec::clear),
    }
}

/// `find_longest_cache_hit` writing each group's hit blocks into `out` (one list
/// per group, reused: a replay looks up once per admission and should not allocate
/// afresh each time); returns the hit length in tokens.
#[allow(clippy::too_many_arguments)]
pub fn find_longest_cache_hit_into(
    pool: &BlockPool,
    hashes: &[BlockHash],
    hash_block_size: u64,
    max_length: u64,
    groups: &[u32],
    spec: GroupSpec,
    alignment: u64,
    out: &mut Vec<Vec<u32>>,
) -> u64 {
    let bs = spec.block_size;
    let view = HashView {
        hashes,
        scale: (bs / hash_block_size) as usize,
    };
    empty_lists(out, groups.len());
    let max_blocks = ((max_length / bs) as usize).min(view.len());
    if let ([key_group], GroupKind::FullAttention | GroupKind::Mla) = (groups, spec.kind) {
        // One group (every unitary lookup): the probe and the list without the
        // per-group lanes, before the lanes are set up.
        let list = &mut out[0];
        for i in 0..max_blocks {
            let hash = hashes[(i + 1) * view.scale - 1];
            match pool.cached_block(&BlockKey {
                hash,
                group: *key_group,
            }) {
                Some(b) => list.push(b),
                None => break,
            }
        }
        let len = list.len() as u64 * bs;
        if alignment == bs {
            return len;
        }
        let len = len - len % alignment;
        list.truncate(len.div_ceil(bs) as usize);
        return len;
    }
    // One block per group for the probed position (reused across probes), on the
    // stack for the usual few groups: a lookup then allocates nothing here.
    let (mut stack, mut heap) = ([NULL_BLOCK; 8], Vec::new());
    let hit: &mut [u32] = if groups.len() <= stack.len() {
        &mut stack[..groups.len()]
    } else {
        heap.resize(groups.len(), NULL_BLOCK);
        &mut heap
    };
    let probe = |i: usize, hit: &mut [u32]| view.get(i).is_some_and(|h| pool.get_cached_block_into(h, groups, hit));
    let push = |out: &mut Vec<Vec<u32>>, blocks: &[u32]| {
        for (list, &b) in out.iter_mut().zip(blocks) {
            list.push(b);
        }
    };
    match spec.kind {
        GroupKind::FullAttention | GroupKind::Mla => {
            // Downward-closed: stop at the first miss (chained hashes).
            for i in 0..max_blocks {
                if !probe(i, hit) {
                    break;
                }
                push(out, hit);
            }
            let mut len = out[0].len() as u64 * bs;
            len -= len % alignment;
            let keep = len.div_ceil(bs) as usize;
            out.iter_mut().for_each(|l| l.truncate(keep));
            len
        }
        GroupKind::SlidingWindow { sliding_window } => {
            let need = (sliding_window - 1).div_ceil(bs) as usize;
            let max_blocks = (max_length / bs) as usize;
            out.iter_mut().for_each(|l| l.resize(max_blocks, NULL_BLOCK));
            let mut run = 0usize;
            let mut found = false;
            for i in (0..max_blocks).rev() {
                if !probe(i, hit) {
                    run = 0;
                    continue;
                }
                // A run's right edge must be aligned for a hybrid hit.
                if run == 0 && bs != alignment && !((i as u64 + 1) * bs).is_multiple_of(alignment) {
                    continue;
                }
                for (list, &blk) in out.iter_mut().zip(hit.iter()) {
                    list[i] = blk;
                }
                run += 1;
                if run >= need {
                    out.iter_mut().for_each(|l| l.truncate(i + run));
                    found = true;
                    break;
                }
            }
            if !found {
                out.iter_mut().for_each(|l| l.truncate(run));
                while bs != alignment && !(out[0].len() as u64 * bs).is_multiple_of(alignment) {
                    out.iter_mut().for_each(|l| {
                        l.pop();
                    });
                }
            }
            out[0].len() as u64 * bs
        }
        GroupKind::ChunkedLocal { attention_chunk_size } => {
            // Everything left of the current chunk is a null "hit", even on an empty cache.
            let start_tok = if max_length > 0 {
                max_length / attention_chunk_size * attention_chunk_size
            } else {
                0
            };
            let start_blk = (start_tok / bs) as usize;
            let max_blocks = (max_length / bs) as usize;
            out.iter_mut().for_each(|l| l.resize(start_blk, NULL_BLOCK));
            for i in start_blk..max_blocks {
                if !probe(i, hit) {
                    break;
                }
                push(out, hit);
            }
            out[0].len() as u64 * bs
        }
        GroupKind::Mamba { .. } => {
            // The last matching state suffices: scan right to left.
            for i in (0..max_blocks).rev() {
                if probe(i, hit) {
                    if bs != alignment && !((i as u64 + 1) * bs).is_multiple_of(alignment) {
                        continue;
                    }
                    for (list, &blk) in out.iter_mut().zip(hit.iter()) {
                        list.extend(std::iter::repeat_n(NULL_BLOCK, i));
                        list.push(blk);
                    }
                    return (i as u64 + 1) * bs;
                }
            }
            0
        }
    }
}
