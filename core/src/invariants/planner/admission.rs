//! Admission: a shed request never returns (PL-NO-READMIT), a benchmark request computes its
//! own KV (PL-NO-POACH), the plan's capacity arithmetic holds (PL-CAPACITY), running requests
//! fit the request slots (PL-SLOTS).

use super::PlannerEvent;
use crate::invariants::{InvariantId, Violation};

pub(super) fn check(event: &PlannerEvent<'_>) -> Option<Violation> {
    use PlannerEvent as E;
    match *event {
        E::Admitted { req, was_shed: true } => Some(Violation::new(
            InvariantId::PlNoReadmit,
            format!("request \"{req}\" was shed and is admitted again"),
        )),
        // A request the plan admits expecting no prefix hit (a benchmark request computing
        // its own KV) must not hit another request's blocks (§8.2 bug 20).
        E::PrefixHit {
            req,
            hit_tokens,
            expects_hit: false,
        } if hit_tokens > 0 => Some(Violation::new(
            InvariantId::PlNoPoach,
            format!("{req} hits {hit_tokens} cached tokens it did not compute (prefix-cache poaching)"),
        )),
        // The plan's capacity arithmetic promised room the pool does not have (§1.3, §2.2;
        // §8.2 bugs 17, 23).
        E::AllocationRefused { req, tokens, free } => Some(Violation::new(
            InvariantId::PlCapacity,
            format!("{req}: allocation of {tokens} tokens refused with {free} free blocks; the plan counted on it"),
        )),
        // §3.1 step 4; §8.2 bug 25: shadows and parked chains hold slots too.
        E::Running { running, slots } if running > slots => Some(Violation::new(
            InvariantId::PlSlots,
            format!("{running} running requests exceed max_num_seqs {slots}"),
        )),
        _ => None,
    }
}
