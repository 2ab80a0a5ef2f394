//! The deferred-free fence: no pool draw or prefix-cache reset with fenced frees pending
//! (PL-FENCE); a request whose step is in flight is freed only behind the fence, and the fence
//! holds it until that step's outputs are processed (PL-INFLIGHT-FREE).

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
        // The fence holds a deferred free until its step's outputs, and every earlier step's,
        // are processed (`deferred_frees` drained once `processed_step_seq` passes them, §3.7).
        E::FencedFreeReleased {
            req,
            step,
            oldest_in_flight: Some(oldest),
        } if oldest <= step => Some(Violation::new(
            InvariantId::PlInflightFree,
            format!("{req}'s fenced free of step {step} is released while the outputs of step {oldest} are in flight"),
        )),
        _ => None,
    }
}
