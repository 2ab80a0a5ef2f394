//! Slips: small mistakes a contributor could make in kvsim's own engine and planners (issue 19),
//! as mutants. Unlike the seed bugs (`bugs.rs`) they restore no bug Dynamo shipped; each must be
//! caught by the invariant named beside it, by `kvsim check` alone (spec/mutants.md, "Slips").

use std::fmt;

use crate::invariants::InvariantId;
use crate::kv::ManagerSlip;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SlipMutant {
    /// A request's cache salt is dropped before its block hashes are computed, so identical
    /// tokens under different salts share cached blocks → PL-NO-POACH.
    SaltIgnored,
    /// The native planner prefills each request to its context instead of one token short
    /// (`context_lengths` where `injected_lengths` belong), so every point is measured one
    /// token per request off its coordinate → PL-COORDINATE.
    CoordinateOffByOne,
    /// The sliding-window manager frees one block fewer than left the window: the pool stays
    /// consistent, the table keeps a block vLLM frees → KV-TABLE-SHAPE.
    WindowEdgeKept,
    /// `remove_skipped_blocks` skips align-mode Mamba groups, so old state blocks stay in
    /// the table → KV-TABLE-SHAPE.
    AlignStatesKept,
    /// A deferred free releases its blocks head first instead of tail first: the chain's head
    /// is evicted before its tail, internally consistent otherwise → KV-FREE-ORDER.
    FreeOrderReversed,
}

impl SlipMutant {
    pub const ALL: [SlipMutant; 5] = [
        SlipMutant::SaltIgnored,
        SlipMutant::CoordinateOffByOne,
        SlipMutant::WindowEdgeKept,
        SlipMutant::AlignStatesKept,
        SlipMutant::FreeOrderReversed,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SlipMutant::SaltIgnored => "salt-ignored",
            SlipMutant::CoordinateOffByOne => "coordinate-off-by-one",
            SlipMutant::WindowEdgeKept => "window-edge-kept",
            SlipMutant::AlignStatesKept => "align-states-kept",
            SlipMutant::FreeOrderReversed => "free-order-reversed",
        }
    }

    /// Whether the slip is in the executor's engine (a replay needs it switched on) rather
    /// than in a planner (the plan carries it).
    pub fn in_engine(self) -> bool {
        match self {
            SlipMutant::SaltIgnored
            | SlipMutant::WindowEdgeKept
            | SlipMutant::AlignStatesKept
            | SlipMutant::FreeOrderReversed => true,
            SlipMutant::CoordinateOffByOne => false,
        }
    }

    /// The slip as the cache-group managers see it, if it lives there.
    pub fn manager(self) -> Option<ManagerSlip> {
        match self {
            SlipMutant::WindowEdgeKept => Some(ManagerSlip::WindowEdgeKept),
            SlipMutant::AlignStatesKept => Some(ManagerSlip::AlignStatesKept),
            SlipMutant::FreeOrderReversed => Some(ManagerSlip::DetachedFreedHeadFirst),
            SlipMutant::SaltIgnored | SlipMutant::CoordinateOffByOne => None,
        }
    }

    /// The invariant this slip must trip.
    pub fn invariant(self) -> InvariantId {
        match self {
            SlipMutant::SaltIgnored => InvariantId::PlNoPoach,
            SlipMutant::CoordinateOffByOne => InvariantId::PlCoordinate,
            SlipMutant::WindowEdgeKept | SlipMutant::AlignStatesKept => InvariantId::KvTableShape,
            SlipMutant::FreeOrderReversed => InvariantId::KvFreeOrder,
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
            SlipMutant::WindowEdgeKept => {
                "remove_skipped_blocks frees one block fewer than left the window (skipped // block_size - 1)"
            }
            SlipMutant::AlignStatesKept => {
                "remove_skipped_blocks is not run for align-mode Mamba groups, so old state blocks are never freed"
            }
            SlipMutant::FreeOrderReversed => {
                "a deferred free hands its detached blocks to free_blocks head first instead of reversed (tail first)"
            }
        }
    }
}

impl fmt::Display for SlipMutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
