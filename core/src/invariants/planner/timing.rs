//! The benchmark's timing rules: host work stays outside timed windows (PL-TIMED-HOST), no
//! stage or point starts after the soft deadline (PL-DEADLINE), every point is timed on a
//! steady step (PL-STEADY).

use super::PlannerEvent;
use crate::invariants::{InvariantId, Violation};

pub(super) fn check(event: &PlannerEvent<'_>) -> Option<Violation> {
    use PlannerEvent as E;
    match *event {
        E::HostOp {
            what,
            timed: Some(point),
        } => Some(Violation::new(
            InvariantId::PlTimedHost,
            format!("{what} inside the timed window of point {point}"),
        )),
        // Dynamo samples the deadline before a new point only once a point has a result or a
        // skip (`_bench_stop_at_timeout_boundary`, §1.12): a rank's first point, and the eager
        // warm-up replicas before it (discarded, so neither), run whatever the clock says.
        E::PointInjected {
            point,
            deadline_passed: true,
            recorded_before,
        } if recorded_before > 0 => Some(Violation::new(
            InvariantId::PlDeadline,
            format!("point {point} injected after the soft deadline passed"),
        )),
        E::StageScheduled {
            req,
            tokens,
            admitting,
            after_deadline: true,
        } => Some(Violation::new(
            InvariantId::PlDeadline,
            format!(
                "{req}: {tokens} prompt tokens {} after the soft deadline passed (a stage build keeps going)",
                if admitting { "admitted" } else { "scheduled" }
            ),
        )),
        E::ShadowRegistering {
            shadow,
            deadline_passed: true,
        } => Some(Violation::new(
            InvariantId::PlDeadline,
            format!("shadow {shadow} registered (a warm-up stage started) after the soft deadline passed"),
        )),
        // PL-STEADY (§1.10, PR #12358; §8.2 bug 21).
        E::SweepEnded {
            admission_only: Some(point),
        } => Some(Violation::new(
            InvariantId::PlSteady,
            format!("point {point} was measured on its admission step only (no steady step)"),
        )),
        _ => None,
    }
}
