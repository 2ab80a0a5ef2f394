//! Token content: explicit ids or a named deterministic source.

use std::cell::RefCell;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_128;

use super::pyrandom::PyRandom;
use crate::kv::hash::{hash_block, FastMap};

/// A request's prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "source", rename_all = "snake_case", deny_unknown_fields)]
pub enum Tokens {
    /// Explicit token ids.
    Ids {
        /// The ids.
        ids: Vec<u64>,
    },
    /// Salt-seeded synthetic tokens below `vocab`; a shorter draw is a prefix of
    /// a longer one with the same salt (dynamo_fpm.md §3.9).
    Salted {
        /// The salt.
        salt: String,
        /// Tokens.
        len: u64,
        /// Vocabulary size.
        vocab: u64,
    },
    /// CPython 3.11's `random.Random(seed).choices(range(low, high), k=len)`, exactly:
    /// how Dynamo draws its synthetic benchmark prompts (`_bench_synthetic_token_ids`,
    /// seed `"dp{rank}:{salt}"`). A shorter draw is a prefix of a longer one.
    PyChoices {
        /// The seed string.
        seed: String,
        /// Tokens.
        len: u64,
        /// Lowest id.
        low: u64,
        /// Highest id.
        high: u64,
    },
}

impl Tokens {
    /// Tokens.
    pub fn len(&self) -> u64 {
        match self {
            Tokens::Ids { ids } => ids.len() as u64,
            Tokens::Salted { len, .. } => *len,
            Tokens::PyChoices { len, .. } => *len,
        }
    }

    /// No token.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Materialise the ids. Position i depends only on (salt, i), so draws nest.
    pub fn materialise(&self) -> Vec<u64> {
        match self {
            Tokens::Ids { ids } => ids.clone(),
            Tokens::Salted { salt, len, vocab } => salted_draw(salt, *len, *vocab),
            Tokens::PyChoices { seed, len, low, high } => {
                PyRandom::from_str_seed(seed).choices_range(*low, *high, *len)
            }
        }
    }
}

/// Tokens drawn lately, at most this many in all (64 MB): the ~5M distinct prompt tokens
/// of the largest built-in sweep (`minimax-m27-ep`, chains) fit.
const DRAW_CACHE_TOKENS: usize = 1 << 23;

/// The longest draw per (seed, vocab), and how many tokens were drawn into it since it was
/// last emptied.
type DrawCache = (FastMap<(u128, u64), Vec<u64>>, usize);

thread_local! {
    /// The longest draw per (seed, vocab) seen lately. Draws nest, so a shadow's prompt (a
    /// prefix of its chain's) and the same prompt added on every rank's engine are copies,
    /// not redraws. A cache only: what it returns is what drawing would give.
    static DRAWS: RefCell<DrawCache> = RefCell::default();
}

fn salted_draw(salt: &str, len: u64, vocab: u64) -> Vec<u64> {
    let seed = salted_seed(salt);
    DRAWS.with_borrow_mut(|(cache, held)| {
        let drawn = cache.entry((seed, vocab)).or_default();
        if (drawn.len() as u64) < len {
            let before = drawn.len();
            drawn.extend((before as u64..len).map(|i| salted_token(seed, i, vocab)));
            *held += drawn.len() - before;
        }
        let out = drawn[..len as usize].to_vec();
        if *held > DRAW_CACHE_TOKENS {
            cache.clear();
            *held = 0;
        }
        out
    })
}

/// Position `i` of `Tokens::Salted { salt, .. }` without drawing the positions before it.
pub fn salted_at(salt: &str, i: u64, vocab: u64) -> u64 {
    salted_token(salted_seed(salt), i, vocab)
}

fn salted_seed(salt: &str) -> u128 {
    hash_block(None, &[], Some(salt))
}

fn salted_token(seed: u128, i: u64, vocab: u64) -> u64 {
    // `hash_block(Some(seed), &[i], None)`, with its byte encoding written out: parent,
    // token count 1, the token, no salt (the hot loop of every synthetic prompt).
    let mut buf = [0u8; 33];
    buf[..16].copy_from_slice(&seed.to_le_bytes());
    buf[16..24].copy_from_slice(&1u64.to_le_bytes());
    buf[24..32].copy_from_slice(&i.to_le_bytes());
    let h = xxh3_128(&buf);
    debug_assert_eq!(h, hash_block(Some(seed), &[i], None));
    (h % u128::from(vocab.max(1))) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salted_draws_nest_and_stay_below_vocab() {
        let short = Tokens::Salted {
            salt: "a".into(),
            len: 10,
            vocab: 50,
        }
        .materialise();
        let long = Tokens::Salted {
            salt: "a".into(),
            len: 30,
            vocab: 50,
        }
        .materialise();
        let other = Tokens::Salted {
            salt: "b".into(),
            len: 10,
            vocab: 50,
        }
        .materialise();
        assert_eq!(short[..], long[..10]);
        assert_ne!(short, other);
        assert!(long.iter().all(|&t| t < 50));
        assert_eq!(salted_at("a", 27, 50), long[27], "one position alone is the same draw");
    }

    #[test]
    fn tokens_py_choices_materialise_python_lists() {
        // random.Random("dp0:__bench_17").choices(range(1, 151552), k=5) in CPython 3.11.
        let t = Tokens::PyChoices {
            seed: "dp0:__bench_17".into(),
            len: 5,
            low: 1,
            high: 151552,
        };
        assert_eq!(t.len(), 5);
        assert_eq!(t.materialise(), [125550, 93440, 38784, 1043, 118568]);
        let long = Tokens::PyChoices {
            seed: "dp0:__bench_17".into(),
            len: 70000,
            low: 1,
            high: 151552,
        }
        .materialise();
        assert_eq!(long.len(), 70000);
        assert_eq!(long.iter().sum::<u64>(), 5317903753);
        assert_eq!(t.materialise()[..], long[..5]);
    }

    #[test]
    fn tokens_serde_round_trips() {
        let json = r#"{"source":"py_choices","seed":"dp1:__bench_0","len":3,"low":1,"high":200064}"#;
        let t: Tokens = serde_json::from_str(json).unwrap();
        assert_eq!(
            t,
            Tokens::PyChoices {
                seed: "dp1:__bench_0".into(),
                len: 3,
                low: 1,
                high: 200064,
            }
        );
        assert_eq!(serde_json::to_string(&t).unwrap(), json);
        assert_eq!(t.materialise(), [190513, 41369, 18636]);
        // The existing forms keep their bytes.
        for json in [
            r#"{"source":"ids","ids":[1,2,3]}"#,
            r#"{"source":"salted","salt":"a","len":4,"vocab":50}"#,
        ] {
            let t: Tokens = serde_json::from_str(json).unwrap();
            assert_eq!(serde_json::to_string(&t).unwrap(), json);
        }
        assert!(serde_json::from_str::<Tokens>(r#"{"source":"py_choices","seed":"a","len":1,"low":1}"#).is_err());
        assert!(
            serde_json::from_str::<Tokens>(r#"{"source":"py_choices","seed":"a","len":1,"low":1,"high":2,"x":0}"#)
                .is_err()
        );
    }
}
