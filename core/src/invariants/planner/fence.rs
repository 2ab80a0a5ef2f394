//! The deferred-free fence: no pool draw or prefix-cache reset with fenced frees pending
//! (PL-FENCE), no unfenced free of a request whose step is in flight (PL-INFLIGHT-FREE).

use super::PlannerEvent;
use crate::invariants::{InvariantId, Violation};

pub(super) fn check(event: &PlannerEvent<'_>) -> Option<Violation> {
    use PlannerEvent as E;
    match *event {
        E::PoolDraw { what, drawn, fenced } if drawn > 0 && fenced > 0 => Some(Violation::new(
            InvariantId::PlFence,
            format!("{what} drew {drawn} blocks with {fenced} fenced frees pending"),
        )),
        E::PrefixReset { fenced } if fenced > 0 => Some(Violation::new(
            InvariantId::PlFence,
            format!("prefix-cache reset with {fenced} fenced frees pending"),
        )),
        E::Freed {
            req,
            in_flight: true,
            fenced: false,
        } => Some(Violation::new(
            InvariantId::PlInflightFree,
            format!("{req} is freed while its step is in flight (outputs not processed)"),
        )),
        _ => None,
    }
}
