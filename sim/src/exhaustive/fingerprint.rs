//! The canonical state fingerprint (spec/exhaustive.md §3): xxh3-128, a fixed
//! function with no random keys, over a byte encoding of everything that decides
//! how the system behaves from here on, with the non-null block ids renamed in
//! order of first appearance (tables, then the free queue). Nothing in the pool
//! depends on which id a block has, only on the order of tables, queue and map,
//! so states equal up to that renaming are indistinguishable by any op sequence
//! (and by every KV-* invariant): the search visits one of them.

use kvsim_core::kv::{RequestStatus, NULL_BLOCK};
use xxhash_rust::xxh3::xxh3_128;

use super::system::State;

/// A 128-bit digest of a state's canonical encoding.
pub type Fingerprint = u128;

/// Not yet renamed.
const UNNAMED: u32 = u32::MAX;

/// Reused encoding buffers (the search fingerprints every transition).
#[derive(Default)]
pub struct Encoder {
    /// Room for the encoding; grown when an encoding did not fit (then it is redone).
    bytes: Vec<u8>,
    /// Block id → its canonical name.
    name: Vec<u32>,
    /// Canonical name → block id.
    order: Vec<u32>,
    /// Prefix-cache map entries: (hash, group, start and end in `entry_ids`).
    entries: Vec<(u128, u32, usize, usize)>,
    entry_ids: Vec<u32>,
}

impl Encoder {
    pub fn fingerprint(&mut self, s: &State) -> Fingerprint {
        self.rename(s);
        loop {
            let mut bytes = std::mem::take(&mut self.bytes);
            let mut out = Out { buf: &mut bytes, at: 0 };
            self.encode_pool(s, &mut out);
            self.encode_requests(s, &mut out);
            let len = out.at;
            if len <= bytes.len() {
                let fp = xxh3_128(&bytes[..len]);
                self.bytes = bytes;
                return fp;
            }
            bytes.resize(len.next_power_of_two(), 0);
            self.bytes = bytes;
        }
    }

    /// Name blocks 1, 2, ... in order of first appearance: each slot's tables (group
    /// order, table order), then the free queue, then any other block (one a mutant
    /// leaked) by id. The null block keeps 0.
    fn rename(&mut self, s: &State) {
        let n = s.kv.pool.num_blocks();
        self.name.clear();
        self.name.resize(n as usize, UNNAMED);
        self.order.clear();
        let (name, order) = (&mut self.name, &mut self.order);
        let mut see = |b: u32| {
            if name[b as usize] == UNNAMED {
                name[b as usize] = order.len() as u32;
                order.push(b);
            }
        };
        see(NULL_BLOCK);
        for r in 0..s.slots.len() as u32 {
            for m in &s.kv.groups {
                m.table(r).iter().for_each(|&b| see(b));
            }
        }
        s.kv.pool.free_queue().for_each(&mut see);
        (0..n).for_each(see);
    }

    /// Per block in canonical order: ref count and hash tag; secondary keys; the
    /// free queue in order; and
    /// the prefix-cache map sorted by key with each key's blocks in insertion order
    /// (the order lookups depend on). Versions and scratch buffers are left out:
    /// only observers read them.
    #[inline(always)]
    fn encode_pool(&mut self, s: &State, out: &mut Out<'_>) {
        let p = &s.kv.pool;
        for k in 0..self.order.len() {
            let b = self.order[k];
            out.u32(p.ref_cnt(b));
            match p.block_hash(b) {
                None => out.u8(0),
                Some(tag) => {
                    out.u8(1);
                    out.u128(tag.key.hash);
                    out.u32(tag.key.group);
                    out.u64(tag.num_tokens);
                }
            }
        }
        let mut secondary = Vec::new();
        p.for_each_secondary(|b, key| secondary.push((self.name[b as usize], key.hash, key.group)));
        secondary.sort_unstable();
        for (b, hash, group) in secondary {
            out.u32(b);
            out.u128(hash);
            out.u32(group);
        }
        out.u32(u32::MAX);
        out.u32(p.num_free_blocks() as u32);
        for b in p.free_queue() {
            out.u32(self.name[b as usize]);
        }
        let (mut entries, mut ids) = (std::mem::take(&mut self.entries), std::mem::take(&mut self.entry_ids));
        entries.clear();
        ids.clear();
        p.for_each_entry(|key, blocks| {
            let start = ids.len();
            ids.extend(blocks.iter().map(|&b| self.name[b as usize]));
            entries.push((key.hash, key.group, start, ids.len()));
        });
        // Keys are unique in the map, so the sort never compares the ranges.
        entries.sort_unstable();
        out.u32(entries.len() as u32);
        for &(hash, group, start, end) in &entries {
            out.u128(hash);
            out.u32(group);
            out.u32((end - start) as u32);
            ids[start..end].iter().for_each(|&b| out.u32(b));
        }
        (self.entries, self.entry_ids) = (entries, ids);
    }

    /// Per group and slot: whether a table exists, its blocks and `num_cached_block`;
    /// per slot: liveness, status, token counts, the uncommitted allocation and the
    /// shared-prefix boundary. A slot's tokens are its fixed prompt followed by the
    /// toy model's outputs, so their count determines them (and the block hashes).
    #[inline(always)]
    fn encode_requests(&mut self, s: &State, out: &mut Out<'_>) {
        for m in &s.kv.groups {
            for r in 0..s.slots.len() as u32 {
                let (table, stamp) = m.table_stamped(r);
                out.u8(u8::from(stamp.is_some()));
                out.u32(table.len() as u32);
                table.iter().for_each(|&b| out.u32(self.name[b as usize]));
                out.u64(m.num_cached_blocks(r).map_or(u64::MAX, |n| n as u64));
            }
        }
        for slot in &s.slots {
            let Some(slot) = slot else {
                out.u8(0);
                continue;
            };
            let q = &slot.req;
            out.u8(1 + status_code(q.status));
            out.u64(q.num_computed_tokens);
            out.u64(q.num_tokens());
            out.u64(slot.uncommitted.map_or(u64::MAX, |n| n));
            out.u64(q.shared_prefix_boundary);
        }
    }
}

/// The encoding's writer: a slice and the place of the next byte, locals of `fingerprint`
/// once inlined (a push per field onto a vector in `self` reloaded its length and capacity
/// at every write). Past the end it only counts, and `fingerprint` makes room and redoes it.
struct Out<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Out<'_> {
    #[inline(always)]
    fn put<const N: usize>(&mut self, v: [u8; N]) {
        if let Some(dst) = self.buf.get_mut(self.at..self.at + N) {
            dst.copy_from_slice(&v);
        }
        self.at += N;
    }

    #[inline(always)]
    fn u8(&mut self, v: u8) {
        self.put([v]);
    }

    #[inline(always)]
    fn u32(&mut self, v: u32) {
        self.put(v.to_le_bytes());
    }

    #[inline(always)]
    fn u64(&mut self, v: u64) {
        self.put(v.to_le_bytes());
    }

    #[inline(always)]
    fn u128(&mut self, v: u128) {
        self.put(v.to_le_bytes());
    }
}

fn status_code(s: RequestStatus) -> u8 {
    match s {
        RequestStatus::Waiting => 0,
        RequestStatus::Running => 1,
        RequestStatus::Preempted => 2,
        RequestStatus::FinishedStopped => 3,
        RequestStatus::FinishedLengthCapped => 4,
        RequestStatus::FinishedAborted => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Bounds, Op};
    use super::*;

    fn state_after(ops: &[Op]) -> State {
        let sys = Bounds::default().system(None);
        let mut s = sys.init();
        for &op in ops {
            assert_eq!(sys.apply(&mut s, op).error, None);
        }
        s
    }

    fn alloc(req: u8, num_new_tokens: u8) -> Op {
        Op::Allocate {
            req,
            num_new_tokens,
            lookup: false,
            delay: false,
        }
    }

    #[test]
    fn states_equal_up_to_block_names_share_a_fingerprint_and_others_do_not() {
        let (add_a, add_b, add_c) = (Op::Add { req: 0 }, Op::Add { req: 1 }, Op::Add { req: 2 });
        let mut enc = Encoder::default();
        // One uncached block each, drawn in either order: the same state up to ids.
        let a_first = state_after(&[add_a, alloc(0, 1), add_c, alloc(2, 1)]);
        let c_first = state_after(&[add_c, alloc(2, 1), add_a, alloc(0, 1)]);
        assert_ne!(a_first.kv.get_block_ids(0), c_first.kv.get_block_ids(0));
        assert_eq!(enc.fingerprint(&a_first), enc.fingerprint(&c_first));
        // Two blocks under one key: which was inserted first decides later lookups.
        let a_first = state_after(&[add_a, alloc(0, 2), add_b, alloc(1, 2)]);
        let b_first = state_after(&[add_b, alloc(1, 2), add_a, alloc(0, 2)]);
        assert_ne!(enc.fingerprint(&a_first), enc.fingerprint(&b_first));
        // Scheduled tokens are state even when the pool is identical (delayed caching).
        let delayed = |num_new_tokens| Op::Allocate {
            req: 0,
            num_new_tokens,
            lookup: false,
            delay: true,
        };
        let three = state_after(&[add_a, delayed(3)]);
        let four = state_after(&[add_a, delayed(4)]);
        assert_eq!(three.kv.get_block_ids(0), four.kv.get_block_ids(0));
        assert_ne!(enc.fingerprint(&three), enc.fingerprint(&four));
    }
}
