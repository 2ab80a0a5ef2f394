//! The canonical state fingerprint (spec/exhaustive.md §3): xxh3-128, a fixed
//! function with no random keys, over a byte encoding of everything that decides
//! how the system behaves from here on, with the non-null block ids renamed in
//! order of first appearance (tables, then the free queue). Nothing in the pool
//! depends on which id a block has, only on the order of tables, queue and map,
//! so states equal up to that renaming are indistinguishable by any op sequence
//! (and by every KV-* invariant): the search visits one of them.
//!
//! The encoding is self-delimiting field by field (so injective): small integers
//! take one byte (`Out::small`), and a block hash one byte when it is one of the
//! hashes the system's requests can have (`HashNames`), sixteen otherwise. Short
//! encodings hash faster (xxh3 has cheaper paths up to 240 bytes).

use kvsim_core::kv::{Request, RequestStatus, NULL_BLOCK};
use xxhash_rust::xxh3::xxh3_128;

use super::system::{output_token, State, System};

/// A 128-bit digest of a state's canonical encoding.
pub type Fingerprint = u128;

/// Not yet renamed.
const UNNAMED: u32 = u32::MAX;

/// Reused encoding buffers (the search fingerprints every transition).
pub struct Encoder {
    hashes: HashNames,
    /// Room for the encoding; grown when an encoding did not fit (then it is redone).
    bytes: Vec<u8>,
    /// Block id → its canonical name.
    name: Vec<u32>,
    /// Canonical name → block id.
    order: Vec<u32>,
    /// Secondary keys: (block name, hash, group).
    secondary: Vec<(u32, u128, u32)>,
    /// Prefix-cache map entries: (hash, group, start and end in `entry_ids`).
    entries: Vec<(u128, u32, usize, usize)>,
    entry_ids: Vec<u32>,
}

impl Encoder {
    /// An encoder for `sys`'s states. Fingerprints are comparable between encoders of
    /// one system (the hash names are the same), not across systems.
    pub fn new(sys: &System) -> Self {
        Encoder {
            hashes: HashNames::of(sys),
            bytes: Vec::new(),
            name: Vec::new(),
            order: Vec::new(),
            secondary: Vec::new(),
            entries: Vec::new(),
            entry_ids: Vec::new(),
        }
    }

    pub fn fingerprint(&mut self, s: &State) -> Fingerprint {
        loop {
            let mut bytes = std::mem::take(&mut self.bytes);
            let mut out = Out { buf: &mut bytes, at: 0 };
            self.encode_requests(s, &mut out);
            self.encode_pool(s, &mut out);
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

    /// Per slot: per group whether a table exists, its blocks and `num_cached_block`;
    /// then liveness, status, token counts, the uncommitted allocation and the
    /// shared-prefix boundary. A slot's tokens are its fixed prompt followed by the
    /// toy model's outputs, so their count determines them (and the block hashes).
    /// Then the free queue in order. Block ids are renamed as they are written: 1, 2,
    /// ... in order of first appearance (the tables, then the free queue, then any other
    /// block, one a mutant leaked, by id); the null block keeps 0.
    #[inline(always)]
    fn encode_requests(&mut self, s: &State, out: &mut Out<'_>) {
        let n = s.kv.pool.num_blocks();
        self.name.clear();
        self.name.resize(n as usize, UNNAMED);
        self.order.clear();
        let (name, order) = (&mut self.name, &mut self.order);
        let see = |name: &mut [u32], order: &mut Vec<u32>, b: u32| {
            let v = &mut name[b as usize];
            if *v == UNNAMED {
                *v = order.len() as u32;
                order.push(b);
            }
            u64::from(*v)
        };
        see(name, order, NULL_BLOCK);
        for (r, slot) in (0..).zip(&s.slots) {
            for g in 0..s.kv.groups.len() {
                let (table, stamp) = s.kv.table_stamped(g, r);
                out.u8(u8::from(stamp.is_some()));
                out.small(table.len() as u64);
                table.iter().for_each(|&b| out.small(see(name, order, b)));
                out.opt(s.kv.num_cached_blocks(g, r).map(|n| n as u64));
            }
            let Some(slot) = slot else {
                out.u8(0);
                continue;
            };
            let q = &slot.req;
            out.u8(1 + status_code(q.status));
            out.small(q.num_computed_tokens);
            out.small(q.num_tokens());
            out.opt(slot.uncommitted);
            out.small(q.shared_prefix_boundary);
        }
        out.small(s.kv.pool.num_free_blocks() as u64);
        s.kv.pool.free_queue().for_each(|b| out.small(see(name, order, b)));
        // Blocks neither held nor free: only a mutant leaks one.
        if order.len() < n as usize {
            (0..n).for_each(|b| {
                see(name, order, b);
            });
        }
    }

    /// Per block in canonical order: ref count and hash tag; secondary keys; and
    /// the prefix-cache map sorted by key with each key's blocks in insertion order
    /// (the order lookups depend on). Versions and scratch buffers are left out:
    /// only observers read them.
    #[inline(always)]
    fn encode_pool(&mut self, s: &State, out: &mut Out<'_>) {
        let p = &s.kv.pool;
        let hashes = &self.hashes;
        for &b in &self.order {
            out.small(u64::from(p.ref_cnt(b)));
            match p.block_hash(b) {
                None => out.u8(0),
                Some(tag) => {
                    out.u8(1);
                    out.hash(hashes, tag.key.hash);
                    out.small(u64::from(tag.key.group));
                    out.small(tag.num_tokens);
                }
            }
        }
        let (name, secondary) = (&self.name, &mut self.secondary);
        secondary.clear();
        p.for_each_secondary(|b, key| secondary.push((name[b as usize], key.hash, key.group)));
        secondary.sort_unstable();
        out.small(secondary.len() as u64);
        for &(b, hash, group) in secondary.iter() {
            out.small(u64::from(b));
            out.hash(hashes, hash);
            out.small(u64::from(group));
        }
        let (entries, ids) = (&mut self.entries, &mut self.entry_ids);
        entries.clear();
        ids.clear();
        p.for_each_entry(|key, blocks| {
            let start = ids.len();
            ids.extend(blocks.iter().map(|&b| name[b as usize]));
            entries.push((key.hash, key.group, start, ids.len()));
        });
        // Keys are unique in the map, so the sort never compares the ranges.
        entries.sort_unstable();
        out.small(entries.len() as u64);
        for &(hash, group, start, end) in entries.iter() {
            out.hash(hashes, hash);
            out.small(u64::from(group));
            out.small((end - start) as u64);
            ids[start..end].iter().for_each(|&b| out.small(u64::from(b)));
        }
    }
}

/// A one-byte name for each block hash the system's requests can have: every block
/// hash of each slot's prompt followed by all its outputs (a shorter sequence's hashes
/// are a prefix of those; no salt). Any other hash is encoded whole, so the encoding
/// stays injective whatever the pool holds. An open-addressing table (the hashes are
/// digests, so their low bits spread): a lookup is a probe or two.
struct HashNames {
    /// (hash, name); name 0 marks an empty slot.
    slots: Vec<(u128, u8)>,
    mask: usize,
}

/// Names 1..=MAX_NAME are one byte; `RAW_HASH` starts a hash written whole.
const MAX_NAME: usize = 0xFC;
const RAW_HASH: u8 = 0xFD;

impl HashNames {
    fn of(sys: &System) -> Self {
        let hbs = sys.init().kv.request_hash_block_size();
        let mut all: Vec<u128> = Vec::new();
        for (r, prompt) in sys.prompts.iter().enumerate() {
            let n = prompt.len() as u64;
            let tokens = prompt
                .iter()
                .copied()
                .chain((n..n + sys.max_output_tokens).map(output_token));
            let q = Request::new(r as u32, tokens.collect(), None, hbs);
            all.extend(&q.block_hashes);
        }
        all.sort_unstable();
        all.dedup();
        all.truncate(MAX_NAME);
        let size = (4 * all.len()).next_power_of_two().max(2);
        let mut names = HashNames {
            slots: vec![(0, 0); size],
            mask: size - 1,
        };
        for (i, &h) in all.iter().enumerate() {
            let mut at = h as usize & names.mask;
            while names.slots[at].1 != 0 {
                at = (at + 1) & names.mask;
            }
            names.slots[at] = (h, i as u8 + 1);
        }
        names
    }

    #[inline(always)]
    fn get(&self, h: u128) -> Option<u8> {
        let mut at = h as usize & self.mask;
        loop {
            let (k, name) = self.slots[at];
            if name == 0 {
                return None;
            }
            if k == h {
                return Some(name);
            }
            at = (at + 1) & self.mask;
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

/// `Out::small`: a value written in eight more bytes follows.
const LONG: u8 = 0xFE;
/// `Out::opt`: none.
const NONE: u8 = 0xFF;

impl Out<'_> {
    #[inline(always)]
    fn put<const N: usize>(&mut self, v: [u8; N]) {
        if let Some(dst) = self.buf.get_mut(self.at..self.at + N) {
            dst.copy_from_slice(&v);
        }
        self.at += N;
    }

    /// `put` of one byte: one bounds check, not a range's two (most writes are one byte).
    #[inline(always)]
    fn u8(&mut self, v: u8) {
        if let Some(dst) = self.buf.get_mut(self.at) {
            *dst = v;
        }
        self.at += 1;
    }

    /// One byte below `LONG` (nearly every count, id and length here), else `LONG` and
    /// the value's eight bytes.
    #[inline(always)]
    fn small(&mut self, v: u64) {
        if v < u64::from(LONG) {
            self.u8(v as u8);
        } else {
            self.u8(LONG);
            self.put(v.to_le_bytes());
        }
    }

    /// `NONE`, or the value as `small` writes it.
    #[inline(always)]
    fn opt(&mut self, v: Option<u64>) {
        match v {
            None => self.u8(NONE),
            Some(v) => self.small(v),
        }
    }

    /// The hash's one-byte name, or `RAW_HASH` and its sixteen bytes.
    #[inline(always)]
    fn hash(&mut self, names: &HashNames, h: u128) {
        match names.get(h) {
            Some(name) => self.u8(name),
            None => {
                self.u8(RAW_HASH);
                self.put(h.to_le_bytes());
            }
        }
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

    /// Every key the pool holds after a few admissions has a one-byte name, distinct keys
    /// distinct names; a hash no request has gets none (it is then encoded whole).
    #[test]
    fn request_hashes_have_distinct_names_and_others_none() {
        let s = state_after(&[
            Op::Add { req: 0 },
            alloc(0, 5),
            Op::Add { req: 1 },
            alloc(1, 5),
            Op::Add { req: 2 },
            alloc(2, 3),
        ]);
        let names = HashNames::of(&Bounds::default().system(None));
        let keys = s.kv.pool.cache_entries();
        assert!(keys.len() >= 2, "{keys:?}");
        let mut named: Vec<u8> = keys
            .iter()
            .map(|(k, _)| names.get(k.hash).expect("a request's hash"))
            .collect();
        named.sort_unstable();
        named.dedup();
        assert_eq!(named.len(), keys.len());
        assert!(named.iter().all(|&n| (1..=MAX_NAME as u8).contains(&n)));
        assert_eq!(names.get(12345), None);
    }

    #[test]
    fn states_equal_up_to_block_names_share_a_fingerprint_and_others_do_not() {
        let (add_a, add_b, add_c) = (Op::Add { req: 0 }, Op::Add { req: 1 }, Op::Add { req: 2 });
        let mut enc = Encoder::new(&Bounds::default().system(None));
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
