//! Shadows: a shadow reads only a parked, drained chain (PL-SHADOW-PARKED); registration is
//! all-or-nothing (PL-SHADOW-ATOMIC); a covered point's shadow registers (PL-COVERAGE).

use super::PlannerEvent;
use crate::invariants::{InvariantId, Violation};

pub(super) fn check(event: &PlannerEvent<'_>) -> Option<Violation> {
    use PlannerEvent as E;
    match *event {
        E::ShadowRead {
            shadow,
            chain,
            busy,
            placeholders,
            computed,
            ctx,
        } if busy || placeholders > 0 || computed < ctx => Some(Violation::new(
            InvariantId::PlShadowParked,
            format!(
                "shadow {shadow} reads chain {chain} (in this forward: {busy}, placeholders: {placeholders}, computed {computed} < ctx {ctx}: {})",
                computed < ctx
            ),
        )),
        E::ShadowRegistered {
            shadow,
            have,
            groups,
            complete: false,
        } => Some(Violation::new(
            InvariantId::PlShadowAtomic,
            format!("shadow {shadow} registered in {have} of {groups} groups"),
        )),
        _ => None,
    }
}

/// A failed registration. One the fault failed is rolled back by the all-or-nothing code:
/// its failure is a coverage question first; what it left behind is atomicity's; a covered
/// point whose shadow failed on its own is the plan's coverage bug.
pub(super) fn failed_registration(event: &PlannerEvent<'_>) -> Vec<Violation> {
    let PlannerEvent::RegistrationFailed {
        shadow,
        covered,
        anticipated,
        injected,
        left_behind,
        groups,
    } = *event
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if covered && !anticipated && injected {
        out.push(Violation::new(
            InvariantId::PlCoverage,
            format!("shadow {shadow} of a covered point failed to register (a local stage failure)"),
        ));
    }
    if left_behind {
        out.push(Violation::new(
            InvariantId::PlShadowAtomic,
            format!("failed registration of shadow {shadow} left {groups} groups' blocks behind"),
        ));
    }
    if covered && !anticipated && !injected {
        out.push(Violation::new(
            InvariantId::PlCoverage,
            format!(
                "shadow {shadow} of a covered point failed to register (the plan did not reserve what it needs: its tail blocks, or a chain deep enough)"
            ),
        ));
    }
    out
}
