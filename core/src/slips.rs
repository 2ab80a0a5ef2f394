//! Slips: small mistakes a contributor could make in kvsim's own engine and planners (issue 19),
//! as mutants. Unlike the seed bugs (`bugs.rs`) they restore no bug Dynamo shipped; each must be
//! caught by the invariant named beside it, by `kvsim check` alone (spec/mutants.md, "Slips").

use std::fmt;

use crate::invariants::InvariantId;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SlipMutant {
    /// A request's cache salt is dropped before its block hashes are computed, so identical
    /// tokens under different salts share cached blocks → PL-NO-POACH.
    SaltIgnored,
    /// The native planner prefills each request to its context instead of one token short
    /// (`context_lengths` where `injected_lengths` belong), so every point is measured one
    /// token per request off its coordinate → PL-COORDINATE.
    CoordinateOffByOne,
}

impl SlipMutant {
    pub const ALL: [SlipMutant; 2] = [SlipMutant::SaltIgnored, SlipMutant::CoordinateOffByOne];

    pub fn name(self) -> &'static str {
        match self {
            SlipMutant::SaltIgnored => "salt-ignored",
            SlipMutant::CoordinateOffByOne => "coordinate-off-by-one",
        }
    }

    /// Whether the slip is in the executor's engine (a replay needs it switched on) rather
    /// than in a planner (the plan carries it).
    pub fn in_engine(self) -> bool {
        match self {
            SlipMutant::SaltIgnored => true,
            SlipMutant::CoordinateOffByOne => false,
        }
    }

    /// The invariant this slip must trip.
    pub fn invariant(self) -> InvariantId {
        match self {
            SlipMutant::SaltIgnored => InvariantId::PlNoPoach,
            SlipMutant::CoordinateOffByOne => InvariantId::PlCoordinate,
        }
    }

    /// What the slip changes, in one line.
    pub fn cause(self) -> &'static str {
        match self {
            SlipMutant::SaltIgnored => {
                "new requests are hashed without their cache salt (vLLM mixes it into the first block's key)"
            }
            SlipMutant::CoordinateOffByOne => {
                "the native planner prefills every request to ctx instead of ctx - 1, so each point reads one token more per request than its coordinate"
            }
        }
    }
}

impl fmt::Display for SlipMutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
