//! `kvsim check`: swarm property suites over the built-in scenarios, coverage
//! goals, bounded exhaustive exploration of tiny pools, and the seed-bug mutants.

pub mod case;
pub mod goals;
pub mod merge;
pub mod par;
pub mod run;
pub mod shrink;
pub mod suite;

/// The seed of case `index` of a run seeded `seed` (splitmix64): disjoint
/// indices give independent cases, so shards split a run exactly.
pub fn case_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
