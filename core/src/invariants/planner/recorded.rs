//! What a recording of the real planner shows: the model runner got the manager's tables
//! (DY-RUNNER-TABLE), the planner neither raised (DY-RAISED) nor stalled (DY-STALLED).

use super::PlannerEvent;
use crate::invariants::{InvariantId, Violation};
use crate::plan::FailureKind;

pub(super) fn check(event: &PlannerEvent<'_>) -> Option<Violation> {
    use PlannerEvent as E;
    match *event {
        E::RunnerTables { mismatch: Some(m) } => Some(Violation::new(
            InvariantId::DyRunnerTable,
            format!("the model runner was handed other block ids than the manager holds: {m}"),
        )),
        E::PlannerFailed {
            kind,
            what,
            error,
            left,
        } => {
            let id = match kind {
                FailureKind::Raised => InvariantId::DyRaised,
                FailureKind::Stalled => InvariantId::DyStalled,
                // An injected failure is judged by what the abort left (PL-CLEAN-END).
                FailureKind::Fault => return None,
            };
            Some(Violation::new(id, format!("{what}: {error}; {left}")))
        }
        _ => None,
    }
}
