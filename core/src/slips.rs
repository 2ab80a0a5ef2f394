//! Slips: small mistakes a contributor could make in kvsim's own engine, model and planners
//! (issue 19), as mutants. Unlike the seed bugs (`bugs.rs`) they restore no bug Dynamo shipped;
//! each must be caught by the invariant in its row, by `kvsim check` alone (spec/mutants.md,
//! "Slips"). Most stay internally consistent (every pool invariant holds), which is why each
//! needed a check of its own semantics.

use std::fmt;

use crate::invariants::InvariantId;
use crate::kv::ManagerSlip;

/// A slip: a small mistake a contributor could make in kvsim itself, as a mutant (spec/mutants.md, "Slips").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SlipMutant {
    /// `salt-ignored`: new requests are hashed without their cache salt (vLLM mixes it into the first block's key).
    SaltIgnored,
    /// `coordinate-off-by-one`: the native planner prefills every request to ctx instead of ctx - 1, so each point reads one token more per request than its coordinate.
    CoordinateOffByOne,
    /// `window-edge-kept`: remove_skipped_blocks frees one block fewer than left the window (skipped // block_size - 1).
    WindowEdgeKept,
    /// `align-states-kept`: remove_skipped_blocks is not run for align-mode Mamba groups, so old state blocks are never freed.
    AlignStatesKept,
    /// `free-order-reversed`: a deferred free hands its detached blocks to free_blocks head first instead of reversed (tail first).
    FreeOrderReversed,
    /// `fence-released-early`: the deferred-free fence releases the frees of the step after the last processed one (processed + 1).
    FenceReleasedEarly,
    /// `in-flight-ignored`: allocate_slots frees what left each window below the computed tokens, forgetting the tokens still in flight under async scheduling (vLLM frees below the processed ones).
    InFlightIgnored,
    /// `reset-ignores-held`: reset_prefix_cache clears the prefix cache even while blocks are in use (vLLM refuses it).
    ResetIgnoresHeld,
}

/// Where a slip lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlipSite {
    /// The engine: a replay needs the slip switched on.
    Engine,
    /// The KV model's managers: switched on through [`ManagerSlip`]; a replay needs it too.
    Model(ManagerSlip),
    /// A planner: the plan carries it.
    Planner,
}

/// One slip's row.
pub struct SlipInfo {
    /// The slip.
    pub slip: SlipMutant,
    /// Its `--mutant` name.
    pub name: &'static str,
    /// Where it lives.
    pub site: SlipSite,
    /// The invariant that must catch it.
    pub invariant: InvariantId,
    /// What the slip changes, in one line.
    pub cause: &'static str,
}

/// Every slip, one row each.
pub const SLIPS: [SlipInfo; 8] = [
    SlipInfo {
        slip: SlipMutant::SaltIgnored,
        name: "salt-ignored",
        site: SlipSite::Engine,
        invariant: InvariantId::PlNoPoach,
        cause: "new requests are hashed without their cache salt (vLLM mixes it into the first block's key)",
    },
    SlipInfo {
        slip: SlipMutant::CoordinateOffByOne,
        name: "coordinate-off-by-one",
        site: SlipSite::Planner,
        invariant: InvariantId::PlCoordinate,
        cause: "the native planner prefills every request to ctx instead of ctx - 1, so each point reads one token more per request than its coordinate",
    },
    SlipInfo {
        slip: SlipMutant::WindowEdgeKept,
        name: "window-edge-kept",
        site: SlipSite::Model(ManagerSlip::WindowEdgeKept),
        invariant: InvariantId::KvTableShape,
        cause: "remove_skipped_blocks frees one block fewer than left the window (skipped // block_size - 1)",
    },
    SlipInfo {
        slip: SlipMutant::AlignStatesKept,
        name: "align-states-kept",
        site: SlipSite::Model(ManagerSlip::AlignStatesKept),
        invariant: InvariantId::KvTableShape,
        cause: "remove_skipped_blocks is not run for align-mode Mamba groups, so old state blocks are never freed",
    },
    SlipInfo {
        slip: SlipMutant::FreeOrderReversed,
        name: "free-order-reversed",
        site: SlipSite::Model(ManagerSlip::DetachedFreedHeadFirst),
        invariant: InvariantId::KvFreeOrder,
        cause: "a deferred free hands its detached blocks to free_blocks head first instead of reversed (tail first)",
    },
    SlipInfo {
        slip: SlipMutant::FenceReleasedEarly,
        name: "fence-released-early",
        site: SlipSite::Engine,
        invariant: InvariantId::PlInflightFree,
        cause: "the deferred-free fence releases the frees of the step after the last processed one (processed + 1)",
    },
    SlipInfo {
        slip: SlipMutant::InFlightIgnored,
        name: "in-flight-ignored",
        site: SlipSite::Model(ManagerSlip::InFlightIgnored),
        invariant: InvariantId::KvTableShape,
        cause: "allocate_slots frees what left each window below the computed tokens, forgetting the tokens still in flight under async scheduling (vLLM frees below the processed ones)",
    },
    SlipInfo {
        slip: SlipMutant::ResetIgnoresHeld,
        name: "reset-ignores-held",
        site: SlipSite::Model(ManagerSlip::ResetIgnoresHeld),
        invariant: InvariantId::KvReset,
        cause: "reset_prefix_cache clears the prefix cache even while blocks are in use (vLLM refuses it)",
    },
];

impl SlipMutant {
    /// Every slip.
    pub const ALL: [SlipMutant; 8] = [
        SlipMutant::SaltIgnored,
        SlipMutant::CoordinateOffByOne,
        SlipMutant::WindowEdgeKept,
        SlipMutant::AlignStatesKept,
        SlipMutant::FreeOrderReversed,
        SlipMutant::FenceReleasedEarly,
        SlipMutant::InFlightIgnored,
        SlipMutant::ResetIgnoresHeld,
    ];

    /// Its row.
    pub fn info(self) -> &'static SlipInfo {
        SLIPS.iter().find(|s| s.slip == self).expect("every slip has a row")
    }

    /// Its `--mutant` name.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Whether a replay needs the slip switched on (it is not in the plan).
    pub fn in_engine(self) -> bool {
        self.info().site != SlipSite::Planner
    }

    /// The slip as the cache-group managers see it, if it lives there.
    pub fn manager(self) -> Option<ManagerSlip> {
        match self.info().site {
            SlipSite::Model(m) => Some(m),
            SlipSite::Engine | SlipSite::Planner => None,
        }
    }

    /// The invariant this slip must trip.
    pub fn invariant(self) -> InvariantId {
        self.info().invariant
    }

    /// What the slip changes, in one line.
    pub fn cause(self) -> &'static str {
        self.info().cause
    }
}

impl fmt::Display for SlipMutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_slip_has_one_row_in_order() {
        assert_eq!(SLIPS.len(), SlipMutant::ALL.len());
        for (row, slip) in SLIPS.iter().zip(SlipMutant::ALL) {
            assert_eq!(row.slip, slip);
        }
    }
}
