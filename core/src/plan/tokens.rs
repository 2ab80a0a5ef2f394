//! Token content: explicit ids or a named deterministic source.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::pyrandom::PyRandom;
use crate::kv::hash::hash_block;

/// A request's prompt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "source", rename_all = "snake_case", deny_unknown_fields)]
pub enum Tokens {
    /// Explicit token ids.
    Ids { ids: Vec<u64> },
    /// Salt-seeded synthetic tokens below `vocab`; a shorter draw is a prefix of
    /// a longer one with the same salt (dynamo_fpm.md §3.9).
    Salted { salt: String, len: u64, vocab: u64 },
    /// CPython 3.11's `random.Random(seed).choices(range(low, high), k=len)`, exactly:
    /// how Dynamo draws its synthetic benchmark prompts (`_bench_synthetic_token_ids`,
    /// seed `"dp{rank}:{salt}"`). A shorter draw is a prefix of a longer one.
    PyChoices {
        seed: String,
        len: u64,
        low: u64,
        high: u64,
    },
}

impl Tokens {
    pub fn len(&self) -> u64 {
        match self {
            Tokens::Ids { ids } => ids.len() as u64,
            Tokens::Salted { len, .. } => *len,
            Tokens::PyChoices { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Materialise the ids. Position i depends only on (salt, i), so draws nest.
    pub fn materialise(&self) -> Vec<u64> {
        match self {
            Tokens::Ids { ids } => ids.clone(),
            Tokens::Salted { salt, len, vocab } => {
                let seed = hash_block(None, &[], Some(salt));
                (0..*len)
                    .map(|i| (hash_block(Some(seed), &[i], None) % u128::from((*vocab).max(1))) as u64)
                    .collect()
            }
            Tokens::PyChoices { seed, len, low, high } => {
                PyRandom::from_str_seed(seed).choices_range(*low, *high, *len)
            }
        }
    }
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
