//! Slips: small mistakes a contributor could make in kvsim's own engine and planners (issue 19),
//! as mutants. Unlike the seed bugs (`bugs.rs`) they restore no bug Dynamo shipped; each must be
//! caught by the invariant named beside it, by `kvsim check` alone (spec/mutants.md, "Slips").

use std::fmt;

use crate::invariants::InvariantId;

/// A contributor's slip in kvsim itself (shows the invariants catch kvsim's own mistakes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SlipMutant {
    /// A request's cache salt is dropped before its block hashes are computed, so identical
    /// tokens under different salts share cached blocks → PL-NO-POACH.
    SaltIgnored,
}

impl SlipMutant {
    /// Every slip.
    pub const ALL: [SlipMutant; 1] = [SlipMutant::SaltIgnored];

    /// Its `--mutant` name.
    pub fn name(self) -> &'static str {
        match self {
            SlipMutant::SaltIgnored => "salt-ignored",
        }
    }

    /// The invariant this slip must trip.
    pub fn invariant(self) -> InvariantId {
        match self {
            SlipMutant::SaltIgnored => InvariantId::PlNoPoach,
        }
    }

    /// What the slip changes, in one line.
    pub fn cause(self) -> &'static str {
        match self {
            SlipMutant::SaltIgnored => {
                "new requests are hashed without their cache salt (vLLM mixes it into the first block's key)"
            }
        }
    }
}

impl fmt::Display for SlipMutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
