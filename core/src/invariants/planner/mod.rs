//! The planner invariants (PL-*, DY-*), one file per family, fed by the typed facts the
//! engine reports while it applies an op ([`PlannerEvent`]). The engine decides nothing
//! here: it states what happened (a pool draw with fenced frees pending, a read of a block
//! holding other content, ...) and [`check`] says which invariant that breaks.
//!
//! Adding a planner invariant: its ID and catalog row (`catalog.rs`), its check in the
//! family file (with a new event variant here if no existing fact carries what it needs),
//! `spec/invariants.md` regenerated, and a bad plan that trips it in
//! `tests/tests/invariant_plans.rs`.

mod admission;
mod content;
mod coordinate;
mod event;
mod fence;
mod free_order;
mod lifecycle;
mod recorded;
mod reset;
mod shadow;
mod table_shape;
mod timing;

pub use coordinate::PointCoordinate;
pub use event::PlannerEvent;

use super::Violation;

/// The violations `event` shows, in the order they are reported.
pub fn check(event: &PlannerEvent<'_>) -> Vec<Violation> {
    use PlannerEvent as E;
    let one = |v: Option<Violation>| v.into_iter().collect();
    match event {
        E::HostOp { .. }
        | E::PointInjected { .. }
        | E::StageScheduled { .. }
        | E::ShadowRegistering { .. }
        | E::SweepEnded { .. } => one(timing::check(event)),
        E::PoolDraw { .. } | E::PrefixReset { .. } | E::Freed { .. } | E::FencedFreeReleased { .. } => {
            one(fence::check(event))
        }
        E::Admitted { .. } | E::PrefixHit { .. } | E::AllocationRefused { .. } | E::Running { .. } => {
            one(admission::check(event))
        }
        E::StateRead { .. } | E::AttentionRead { .. } | E::TailForked { .. } => one(content::check(event)),
        E::TimedForward { .. } => one(coordinate::check(event)),
        E::TablesShaped { .. } => one(table_shape::check(event)),
        E::RequestFreed { .. } => one(free_order::check(event)),
        E::PrefixCacheReset { .. } => one(reset::check(event)),
        E::ShadowRead { .. } | E::ShadowRegistered { .. } => one(shadow::check(event)),
        E::RegistrationFailed { .. } => shadow::failed_registration(event),
        E::Leftovers { .. } => one(lifecycle::check(event)),
        E::RunnerTables { .. } | E::PlannerFailed { .. } => one(recorded::check(event)),
    }
}
