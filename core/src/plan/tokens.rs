//! Token content: explicit ids or a named deterministic source.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
}

impl Tokens {
    pub fn len(&self) -> u64 {
        match self {
            Tokens::Ids { ids } => ids.len() as u64,
            Tokens::Salted { len, .. } => *len,
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
}
