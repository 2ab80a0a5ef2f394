//! Invariants across attention-DP ranks.

use super::{InvariantId, Violation};

/// PL-DP-LOCKSTEP: if any rank injects a point in a step, every rank injects
/// that same point in that step. `injected[r]` is rank r's injection.
pub fn check_lockstep(step: u64, injected: &[Option<u64>]) -> Option<Violation> {
    let first = injected.iter().flatten().next()?;
    if injected.iter().all(|p| p.as_ref() == Some(first)) {
        return None;
    }
    Some(Violation {
        id: InvariantId::PlDpLockstep,
        detail: format!("step {step}: ranks inject {injected:?}"),
    })
}
