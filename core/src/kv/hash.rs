//! Chained block hashes (vllm_kv.md §2).
//!
//! vLLM hashes every full `hash_block_size` chunk of a request's tokens, chained on
//! the parent hash, with the cache salt as an extra key of the first block only.
//! Hash values are never observed (kvtrace-format.md §2.2), so any collision-free
//! chained hash will do: we use xxh3-128 over a fixed byte encoding.

use std::hash::{BuildHasherDefault, Hasher};

use xxhash_rust::xxh3::{xxh3_128, Xxh3};

/// A block hash (the digest of parent, tokens and extra keys).
pub type BlockHash = u128;

/// A prefix-cache key: the same content cached in two groups is two keys (§2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlockKey {
    /// The chained block hash.
    pub hash: BlockHash,
    /// The cache group.
    pub group: u32,
}

impl std::hash::Hash for BlockKey {
    /// The hash is already a uniformly random digest: its low word, the group mixed in,
    /// is one word to hash (one multiply in `DigestHasher`), not three. Equal keys still
    /// hash alike; maps keyed by it are never iterated where the order could show.
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash as u64 ^ u64::from(self.group).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    }
}

/// vLLM's `NONE_HASH` stands in for the missing parent of the first block (§2.3).
const NONE_HASH: BlockHash = 0x6b76_7369_6d2d_6e6f_6e65_2d68_6173_6821;

/// Hash one block: `H(parent or NONE_HASH, tokens, salt)` (§2.2, §2.4).
/// `salt` is `Some` only for the first block and only when non-empty.
pub fn hash_block(parent: Option<BlockHash>, tokens: &[u64], salt: Option<&str>) -> BlockHash {
    // The usual block sizes without a salt: the encoding's length is a constant, so
    // every byte is written at a fixed offset (no zeroing) and xxh3's length tests fold.
    if salt.is_none() {
        match tokens.len() {
            4 => return hash_unsalted::<4, 57>(parent, tokens),
            8 => return hash_unsalted::<8, 89>(parent, tokens),
            16 => return hash_unsalted::<16, 153>(parent, tokens),
            _ => {}
        }
    }
    // The digest of a byte string does not depend on how it is fed in, so the
    // common small block is hashed in one shot from the stack (XXH3's streaming
    // state is costly to set up); larger ones stream through a stack chunk.
    // 256 bytes hold up to 28 tokens (every usual block size) and cost half the
    // zeroing of a larger buffer, which showed up in replay profiles.
    const STACK: usize = 256;
    let salt_len = salt.map_or(0, |s| 8 + s.len());
    let mut buf = [0u8; STACK];
    buf[..16].copy_from_slice(&parent.unwrap_or(NONE_HASH).to_le_bytes());
    buf[16..24].copy_from_slice(&(tokens.len() as u64).to_le_bytes());
    let w = 24;
    if w + 8 * tokens.len() + 1 + salt_len <= STACK {
        // Fixed offsets: no running write position to bounds-check per token (the
        // per-token copies were a third of this function's cost); the usual block
        // sizes copied at a size known here, as inline stores instead of a memcpy call.
        let end = w + 8 * tokens.len();
        match tokens.len() {
            4 => put_tokens(&mut buf[w..w + 32], &tokens[..4]),
            8 => put_tokens(&mut buf[w..w + 64], &tokens[..8]),
            16 => put_tokens(&mut buf[w..w + 128], &tokens[..16]),
            _ => put_tokens(&mut buf[w..end], tokens),
        }
        let len = match salt {
            Some(s) => {
                buf[end] = 1;
                buf[end + 1..end + 9].copy_from_slice(&(s.len() as u64).to_le_bytes());
                buf[end + 9..end + 9 + s.len()].copy_from_slice(s.as_bytes());
                end + 9 + s.len()
            }
            None => {
                buf[end] = 0;
                end + 1
            }
        };
        return xxh3_128(&buf[..len]);
    }
    let mut h = Xxh3::new();
    h.update(&buf[..w]);
    for chunk in tokens.chunks(STACK / 8) {
        for (k, t) in chunk.iter().enumerate() {
            buf[8 * k..8 * k + 8].copy_from_slice(&t.to_le_bytes());
        }
        h.update(&buf[..8 * chunk.len()]);
    }
    match salt {
        Some(s) => {
            h.update(&[1]);
            h.update(&(s.len() as u64).to_le_bytes());
            h.update(s.as_bytes());
        }
        None => h.update(&[0]),
    }
    h.digest128()
}

/// `hash_block` of `N` tokens without a salt; `LEN` is the encoding's length, 8·N + 25.
#[inline(always)]
fn hash_unsalted<const N: usize, const LEN: usize>(parent: Option<BlockHash>, tokens: &[u64]) -> BlockHash {
    debug_assert_eq!(LEN, 8 * N + 25);
    let mut buf = [0u8; LEN];
    buf[..16].copy_from_slice(&parent.unwrap_or(NONE_HASH).to_le_bytes());
    buf[16..24].copy_from_slice(&(N as u64).to_le_bytes());
    put_tokens(&mut buf[24..24 + 8 * N], &tokens[..N]);
    // The last byte: no salt (0), as `[0; LEN]` left it.
    xxh3_128(&buf)
}

/// `tokens` as little-endian words into `dst` (8 bytes each).
#[inline(always)]
fn put_tokens(dst: &mut [u8], tokens: &[u64]) {
    for (d, t) in dst.chunks_exact_mut(8).zip(tokens) {
        d.copy_from_slice(&t.to_le_bytes());
    }
}

/// Extend `hashes` with every newly complete `block_size` chunk of `tokens` (§2.5).
pub fn extend_block_hashes(hashes: &mut Vec<BlockHash>, tokens: &[u64], block_size: usize, salt: Option<&str>) {
    let salt = salt.filter(|s| !s.is_empty());
    let done = hashes.len();
    if (done + 1) * block_size > tokens.len() {
        return;
    }
    hashes.reserve(tokens.len() / block_size - done);
    let mut parent = hashes.last().copied();
    let mut blocks = tokens[done * block_size..].chunks_exact(block_size);
    if done == 0 && salt.is_some() {
        // Only the first block carries the salt.
        let first = blocks.next().expect("one full block at least");
        parent = Some(hash_block(None, first, salt));
        hashes.push(parent.expect("just hashed"));
    }
    // The chain of the usual block sizes, each hash as `hash_block` makes it unsalted.
    let mut chain = |hash: fn(Option<BlockHash>, &[u64]) -> BlockHash| {
        for block in blocks.by_ref() {
            let h = hash(parent, block);
            hashes.push(h);
            parent = Some(h);
        }
    };
    match block_size {
        4 => chain(chain_unsalted::<4, 57, 41>),
        8 => chain(chain_unsalted::<8, 89, 57>),
        16 => chain(chain_unsalted::<16, 153, 89>),
        _ => chain(|p, block| hash_block(p, block, None)),
    }
}

/// The count word's top bit of an encoding with 4-byte tokens (`chain_unsalted`): no
/// other encoding sets it (a block of 2^63 tokens cannot be), so the two never meet.
const NARROW: u64 = 1 << 63;

/// A chained block of the usual sizes: `hash_unsalted`'s encoding, or, when every token
/// fits 32 bits (token ids do), the same with 4-byte tokens and `NARROW` in the count
/// word (`LEN4` = 4·N + 25 bytes): xxh3 reads a third fewer bytes, a shorter path for
/// 16 tokens. Only the request chains use it; their values are never observed, only
/// compared with each other (`hash_block` itself keeps one encoding).
#[inline(always)]
fn chain_unsalted<const N: usize, const LEN: usize, const LEN4: usize>(
    parent: Option<BlockHash>,
    tokens: &[u64],
) -> BlockHash {
    debug_assert_eq!(LEN4, 4 * N + 25);
    let tokens: &[u64; N] = tokens[..N].try_into().expect("N tokens");
    if tokens.iter().fold(0, |acc, &t| acc | t) >> 32 != 0 {
        return hash_unsalted::<N, LEN>(parent, tokens);
    }
    let mut buf = [0u8; LEN4];
    buf[..16].copy_from_slice(&parent.unwrap_or(NONE_HASH).to_le_bytes());
    buf[16..24].copy_from_slice(&(N as u64 | NARROW).to_le_bytes());
    for (d, &t) in buf[24..24 + 4 * N].chunks_exact_mut(4).zip(tokens) {
        d.copy_from_slice(&(t as u32).to_le_bytes());
    }
    // The last byte: no salt (0), as `[0; LEN4]` left it.
    xxh3_128(&buf)
}

/// A pass-through hasher for keys that are already uniformly random digests.
/// Maps keyed by it are only ever probed, never iterated, so no order leaks.
#[derive(Default)]
pub struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Little-endian 8-byte words, the last one zero-padded; the tail is assembled
        // byte by byte (short keys such as request ids then need no memcpy call).
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.write_u64(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        let tail = words.remainder();
        if !tail.is_empty() {
            let w = tail.iter().rev().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
            self.write_u64(w);
        }
    }
    /// What `write(&[i])` hashes (one zero-padded word), without the slice.
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (self.0.rotate_left(29) ^ u64::from(i)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(29) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u128(&mut self, i: u128) {
        self.write_u64(i as u64);
        self.write_u64((i >> 64) as u64);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
}

/// Build-hasher for digest-keyed and small-integer-keyed maps.
pub type DigestBuild = BuildHasherDefault<DigestHasher>;
/// A probe-only hash map (never iterated where order could leak).
pub type FastMap<K, V> = std::collections::HashMap<K, V, DigestBuild>;
/// A probe-only hash set.
pub type FastSet<K> = std::collections::HashSet<K, DigestBuild>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference digest: every field streamed in separately.
    fn streamed(parent: Option<BlockHash>, tokens: &[u64], salt: Option<&str>) -> BlockHash {
        let mut h = Xxh3::new();
        h.update(&parent.unwrap_or(NONE_HASH).to_le_bytes());
        h.update(&(tokens.len() as u64).to_le_bytes());
        for t in tokens {
            h.update(&t.to_le_bytes());
        }
        match salt {
            Some(s) => {
                h.update(&[1]);
                h.update(&(s.len() as u64).to_le_bytes());
                h.update(s.as_bytes());
            }
            None => h.update(&[0]),
        }
        h.digest128()
    }

    /// The reference digest of an unsalted chained block of 4, 8 or 16 tokens: 4-byte
    /// tokens and `NARROW` in the count word when every token fits 32 bits.
    fn chained(parent: Option<BlockHash>, tokens: &[u64]) -> BlockHash {
        if tokens.iter().any(|&t| t > u64::from(u32::MAX)) {
            return streamed(parent, tokens, None);
        }
        let mut h = Xxh3::new();
        h.update(&parent.unwrap_or(NONE_HASH).to_le_bytes());
        h.update(&(tokens.len() as u64 | NARROW).to_le_bytes());
        for &t in tokens {
            h.update(&(t as u32).to_le_bytes());
        }
        h.update(&[0]);
        h.digest128()
    }

    #[test]
    fn digests_do_not_depend_on_the_buffering() {
        let salt = "s".repeat(300);
        for n in [0usize, 1, 2, 3, 4, 5, 8, 16, 27, 28, 29, 59, 60, 61, 64, 100, 129, 1000] {
            let toks: Vec<u64> = (0..n as u64).map(|t| t.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
            for s in [None, Some("x"), Some(salt.as_str())] {
                for p in [None, Some(42u128 << 70)] {
                    assert_eq!(hash_block(p, &toks, s), streamed(p, &toks, s), "n={n}");
                }
            }
        }
    }

    #[test]
    fn the_digest_hasher_reads_bytes_as_zero_padded_little_endian_words() {
        // The reference: every 8-byte chunk copied into a zeroed word.
        fn reference(bytes: &[u8]) -> u64 {
            let mut h = 0u64;
            for chunk in bytes.chunks(8) {
                let mut buf = [0u8; 8];
                buf[..chunk.len()].copy_from_slice(chunk);
                h = (h.rotate_left(29) ^ u64::from_le_bytes(buf)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
            }
            h
        }
        let bytes: Vec<u8> = (0..40u8).map(|b| b.wrapping_mul(37).wrapping_add(11)).collect();
        for n in 0..=bytes.len() {
            let mut h = DigestHasher::default();
            h.write(&bytes[..n]);
            assert_eq!(h.finish(), reference(&bytes[..n]), "{n} bytes");
        }
        for i in [0u8, 1, 0x7f, 0xff] {
            let (mut a, mut b) = (DigestHasher::default(), DigestHasher::default());
            a.write_u8(i);
            b.write(&[i]);
            assert_eq!(a.finish(), b.finish(), "{i}");
        }
    }

    #[test]
    fn the_chain_is_each_block_streamed_on_its_parent_in_any_number_of_extensions() {
        // Wide tokens, tokens that fit 32 bits (4-byte encoding), and a mix of both.
        let wide: Vec<u64> = (0..70u64).map(|t| t.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 7).collect();
        let narrow: Vec<u64> = wide.iter().map(|t| t >> 32).collect();
        let mixed: Vec<u64> = (0..70).map(|i| if i % 13 == 5 { wide[i] } else { narrow[i] }).collect();
        for toks in [wide, narrow, mixed] {
            chain_matches_reference(&toks);
        }
    }

    fn chain_matches_reference(toks: &[u64]) {
        for bs in 1..=17 {
            for salt in [None, Some("s")] {
                let mut want: Vec<BlockHash> = Vec::new();
                for (i, block) in toks.chunks_exact(bs).enumerate() {
                    let first_salt = if i == 0 { salt } else { None };
                    want.push(if first_salt.is_none() && matches!(bs, 4 | 8 | 16) {
                        chained(want.last().copied(), block)
                    } else {
                        streamed(want.last().copied(), block, first_salt)
                    });
                }
                for step in [1, 3, 70] {
                    let mut got = Vec::new();
                    for end in (0..=toks.len()).step_by(step).chain([toks.len()]) {
                        extend_block_hashes(&mut got, &toks[..end], bs, salt);
                        assert_eq!(got, want[..end / bs], "bs {bs} salt {salt:?} up to {end}");
                    }
                }
            }
        }
    }

    #[test]
    fn salt_changes_only_first_block_and_empty_salt_is_none() {
        let toks: Vec<u64> = (0..8).collect();
        let (mut a, mut b, mut c) = (vec![], vec![], vec![]);
        extend_block_hashes(&mut a, &toks, 4, None);
        extend_block_hashes(&mut b, &toks, 4, Some(""));
        extend_block_hashes(&mut c, &toks, 4, Some("x"));
        assert_eq!(a, b);
        assert_ne!(a[0], c[0]);
        assert_ne!(a[1], c[1], "chaining carries the salt forward");
    }

    #[test]
    fn only_full_blocks_are_hashed_and_extension_is_incremental() {
        let toks: Vec<u64> = (0..11).collect();
        let mut h = vec![];
        extend_block_hashes(&mut h, &toks[..7], 4, None);
        assert_eq!(h.len(), 1);
        extend_block_hashes(&mut h, &toks, 4, None);
        let mut all = vec![];
        extend_block_hashes(&mut all, &toks, 4, None);
        assert_eq!(h, all);
        assert_eq!(all.len(), 2);
    }
}
