//! A chain's names: its request id per generation, and its salt and prompt, stable per (rank, index).

use crate::plan::Tokens;

/// Chain `i`'s cache salt on `rank`: the same in every generation, so a deeper
/// chain hits the previous one in the prefix cache.
pub(super) fn chain_salt(rank: u32, i: usize) -> String {
    format!("chain:dp{rank}:c{i}")
}

/// Chain `i`'s first `len` prompt tokens on `rank` (salted content).
pub(super) fn chain_tokens(rank: u32, i: usize, len: u64, vocab: u64) -> Tokens {
    Tokens::Salted {
        salt: chain_salt(rank, i),
        len,
        vocab,
    }
}

/// Chain `i`'s request id on `rank` in stage `generation`.
pub(super) fn chain_id(generation: u64, rank: u32, i: usize) -> String {
    format!("kvwarm_chain.g{generation}.dp{rank}.c{i}")
}
