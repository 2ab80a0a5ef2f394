//! What each block holds: a tag derived from the tokens written into it, so any
//! read can be checked against what the reader expects (the simulator's
//! equivalent of the GPU executor's content checksums).

use crate::kv::hash::{extend_block_hashes, hash_block};

/// Content of a block holding synthetic ("fake") KV.
pub const SYNTHETIC_TAG: u128 = 0x7379_6e74_6865_7469_6373_796e_7468_6574;
/// Content of a zeroed block.
pub const ZERO_TAG: u128 = 0x7a65_726f_7a65_726f_7a65_726f_7a65_726f;
const STATE_MARK: u64 = u64::MAX - 7;
const RANDOM_STATE_MARK: u64 = u64::MAX - 11;

/// The deterministic random recurrent state a random-KDA shadow starts from
/// (dynamo_fpm.md §8.1 invariant 49: uniform values seeded per request, layer
/// and rank, policy `uniform-request-layer-rank-v1`): one tag per (rank, shadow, group).
pub fn random_state_tag(rank: u32, shadow: &str, group: usize) -> u128 {
    let mut ids: Vec<u64> = vec![RANDOM_STATE_MARK, u64::from(rank), group as u64];
    ids.extend(shadow.bytes().map(u64::from));
    hash_block(None, &ids, None)
}

/// Per-request prefix hashes at one block size, extended as tokens grow.
#[derive(Clone, Debug, Default)]
pub struct PrefixHashes {
    bs: usize,
    full: Vec<u128>,
}

impl PrefixHashes {
    /// Prefix hashes at block size `bs`, none yet.
    pub fn new(bs: u64) -> Self {
        PrefixHashes {
            bs: bs as usize,
            full: Vec::new(),
        }
    }

    /// Attention block `i` holding tokens `[i·bs, upto)` of `tokens`.
    pub fn block_tag(&mut self, tokens: &[u64], i: usize, upto: usize) -> u128 {
        // Positions past the known tokens cannot be named: they read as a prefix of
        // what is known (never equal to a full write, so a reader of them fails).
        let upto = upto.min(tokens.len());
        extend_block_hashes(&mut self.full, &tokens[..upto], self.bs, None);
        let start = (i * self.bs).min(upto);
        if upto == start + self.bs {
            return self.full[i];
        }
        let parent = if i == 0 { None } else { self.full.get(i - 1).copied() };
        hash_block(parent, &tokens[start..upto], None)
    }

    /// Recurrent state after consuming `tokens[..n]`.
    pub fn state_tag(&mut self, tokens: &[u64], n: usize) -> u128 {
        if n == 0 {
            return ZERO_TAG;
        }
        let i = (n - 1) / self.bs;
        let t = self.block_tag(tokens, i, n);
        hash_block(Some(t), &[STATE_MARK], None)
    }
}

#[cfg(test)]
mod tests {
    use super::PrefixHashes;

    #[test]
    fn a_partial_blocks_tag_names_its_parent() {
        // The same partial tokens after different full blocks are different content.
        let a = [1, 2, 3, 4, 9, 9];
        let b = [5, 6, 7, 8, 9, 9];
        let tag = |t: &[u64]| PrefixHashes::new(4).block_tag(t, 1, 6);
        assert_ne!(tag(&a), tag(&b));
        assert_eq!(tag(&a), tag(&a));
        // A full block's tag is the prefix-chained block hash.
        let mut p = PrefixHashes::new(4);
        assert_eq!(p.block_tag(&a, 0, 4), PrefixHashes::new(4).block_tag(&a[..4], 0, 4));
    }
}
