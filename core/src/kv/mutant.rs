//! Deliberate bugs in the block pool. Each one breaks exactly the model invariant
//! named beside it; the property suites must catch every one (spec/invariants.md).

use std::fmt;
use std::str::FromStr;

/// A deliberate block-pool bug (a model mutant): shows a model invariant can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ModelMutant {
    /// `touch` adopts a hit without taking a reference → KV-REF.
    TouchForgetsRef,
    /// `touch` leaves a ref-0 hit block in the free queue → KV-FREEQ.
    TouchKeepsFreeQueue,
    /// Reusing a cached block clears its tag but leaves the map entry → KV-CACHE.
    StaleCacheEntry,
    /// `free_blocks` drops blocks that reach ref 0 instead of queueing them → KV-CONSERVE.
    LeakOnFree,
    /// The pool forgets to reserve block 0, so it gets handed out → KV-NULL.
    HandOutNullBlock,
}

impl ModelMutant {
    /// Every model mutant.
    pub const ALL: [ModelMutant; 5] = [
        ModelMutant::TouchForgetsRef,
        ModelMutant::TouchKeepsFreeQueue,
        ModelMutant::StaleCacheEntry,
        ModelMutant::LeakOnFree,
        ModelMutant::HandOutNullBlock,
    ];

    /// Its `--mutant` name.
    pub fn name(self) -> &'static str {
        match self {
            ModelMutant::TouchForgetsRef => "touch-forgets-ref",
            ModelMutant::TouchKeepsFreeQueue => "touch-keeps-free-queue",
            ModelMutant::StaleCacheEntry => "stale-cache-entry",
            ModelMutant::LeakOnFree => "leak-on-free",
            ModelMutant::HandOutNullBlock => "hand-out-null-block",
        }
    }
}

/// Slips in the cache-group managers (issue 19): mistakes a contributor could make in
/// kvsim's own model that stay internally consistent (every KV-* pool invariant holds), so
/// only the table-shape check (KV-TABLE-SHAPE) or the vLLM conformance run sees them.
/// Switched on through `slips::SlipMutant`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ManagerSlip {
    /// `remove_skipped_blocks` frees one block fewer than left the window.
    WindowEdgeKept,
    /// `remove_skipped_blocks` is not run for align-mode Mamba groups (as if only attention
    /// groups dropped history): old state blocks are never freed.
    AlignStatesKept,
    /// A deferred free releases the detached blocks head first instead of tail first.
    DetachedFreedHeadFirst,
    /// `allocate_slots` frees below the computed tokens, ignoring those still in flight.
    InFlightIgnored,
    /// `reset_prefix_cache` clears the cache even while blocks are in use.
    ResetIgnoresHeld,
}

impl fmt::Display for ModelMutant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ModelMutant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            let known: Vec<_> = Self::ALL.iter().map(|m| m.name()).collect();
            format!("unknown model mutant {s:?}; known: {}", known.join(", "))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ModelMutant;

    #[test]
    fn every_model_mutant_parses_back_from_its_name_and_unknown_names_are_refused() {
        for m in ModelMutant::ALL {
            assert_eq!(m.name().parse::<ModelMutant>(), Ok(m), "{m}");
            assert_eq!(m.to_string(), m.name());
        }
        let err = "leak-on-frees".parse::<ModelMutant>().unwrap_err();
        assert!(err.starts_with("unknown model mutant \"leak-on-frees\""), "{err}");
        assert!(
            err.contains("touch-forgets-ref") && err.contains("hand-out-null-block"),
            "{err}"
        );
    }
}
