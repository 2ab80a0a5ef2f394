//! Every invariant's ID, typed. The catalog (`catalog.rs`) gives each its statement, source
//! and the one function that checks it; reports and plans carry the ID's text (`KV-REF`, ...).

use std::fmt;

/// An invariant of the catalog.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InvariantId {
    /// `KV-REF`
    KvRef,
    /// `KV-FREEQ`
    KvFreeq,
    /// `KV-CACHE`
    KvCache,
    /// `KV-CONSERVE`
    KvConserve,
    /// `KV-NULL`
    KvNull,
    /// `PL-WINDOW`
    PlWindow,
    /// `PL-SHADOW-ATOMIC`
    PlShadowAtomic,
    /// `PL-FENCE`
    PlFence,
    /// `PL-NO-READMIT`
    PlNoReadmit,
    /// `PL-SHADOW-PARKED`
    PlShadowParked,
    /// `PL-COVERAGE`
    PlCoverage,
    /// `PL-CLEAN-END`
    PlCleanEnd,
    /// `PL-DP-LOCKSTEP`
    PlDpLockstep,
    /// `PL-DEADLINE`
    PlDeadline,
    /// `PL-TIMED-HOST`
    PlTimedHost,
    /// `PL-INFLIGHT-FREE`
    PlInflightFree,
    /// `PL-CAPACITY`
    PlCapacity,
    /// `PL-NO-POACH`
    PlNoPoach,
    /// `PL-SLOTS`
    PlSlots,
    /// `PL-STEADY`
    PlSteady,
    /// `AR-REGIME`
    ArRegime,
    /// `DY-RAISED`
    DyRaised,
    /// `DY-STALLED`
    DyStalled,
    /// `DY-RUNNER-TABLE`
    DyRunnerTable,
}

impl InvariantId {
    /// Every ID, in catalog order.
    pub const ALL: [InvariantId; 24] = [
        InvariantId::KvRef,
        InvariantId::KvFreeq,
        InvariantId::KvCache,
        InvariantId::KvConserve,
        InvariantId::KvNull,
        InvariantId::PlWindow,
        InvariantId::PlShadowAtomic,
        InvariantId::PlFence,
        InvariantId::PlNoReadmit,
        InvariantId::PlShadowParked,
        InvariantId::PlCoverage,
        InvariantId::PlCleanEnd,
        InvariantId::PlDpLockstep,
        InvariantId::PlDeadline,
        InvariantId::PlTimedHost,
        InvariantId::PlInflightFree,
        InvariantId::PlCapacity,
        InvariantId::PlNoPoach,
        InvariantId::PlSlots,
        InvariantId::PlSteady,
        InvariantId::ArRegime,
        InvariantId::DyRaised,
        InvariantId::DyStalled,
        InvariantId::DyRunnerTable,
    ];

    /// The ID as reports, plans and `spec/invariants.md` spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            InvariantId::KvRef => "KV-REF",
            InvariantId::KvFreeq => "KV-FREEQ",
            InvariantId::KvCache => "KV-CACHE",
            InvariantId::KvConserve => "KV-CONSERVE",
            InvariantId::KvNull => "KV-NULL",
            InvariantId::PlWindow => "PL-WINDOW",
            InvariantId::PlShadowAtomic => "PL-SHADOW-ATOMIC",
            InvariantId::PlFence => "PL-FENCE",
            InvariantId::PlNoReadmit => "PL-NO-READMIT",
            InvariantId::PlShadowParked => "PL-SHADOW-PARKED",
            InvariantId::PlCoverage => "PL-COVERAGE",
            InvariantId::PlCleanEnd => "PL-CLEAN-END",
            InvariantId::PlDpLockstep => "PL-DP-LOCKSTEP",
            InvariantId::PlDeadline => "PL-DEADLINE",
            InvariantId::PlTimedHost => "PL-TIMED-HOST",
            InvariantId::PlInflightFree => "PL-INFLIGHT-FREE",
            InvariantId::PlCapacity => "PL-CAPACITY",
            InvariantId::PlNoPoach => "PL-NO-POACH",
            InvariantId::PlSlots => "PL-SLOTS",
            InvariantId::PlSteady => "PL-STEADY",
            InvariantId::ArRegime => "AR-REGIME",
            InvariantId::DyRaised => "DY-RAISED",
            InvariantId::DyStalled => "DY-STALLED",
            InvariantId::DyRunnerTable => "DY-RUNNER-TABLE",
        }
    }

    /// The ID spelled `text`, if it is one.
    pub fn parse(text: &str) -> Option<InvariantId> {
        InvariantId::ALL.into_iter().find(|id| id.as_str() == text)
    }
}

impl fmt::Display for InvariantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_parses_back() {
        for id in InvariantId::ALL {
            assert_eq!(InvariantId::parse(id.as_str()), Some(id));
        }
        assert_eq!(InvariantId::parse("PL-NOPE"), None);
    }
}
