//! Timed windows and point injection: which windows time a point's admission step and which
//! its steady steps, and when an injection reaches the rank group (message lag, §7.1).

use super::apply::OpOutcome;
use super::{Engine, Mismatch};
use crate::bugs::BugMutant;
use crate::invariants::planner::PlannerEvent;

impl Engine {
    pub(super) fn begin_timed(&mut self, point: u64) -> Result<OpOutcome, Mismatch> {
        if let Some(open) = self.timed {
            return Err(Mismatch(format!(
                "timed window of point {point} opened inside point {open}'s"
            )));
        }
        self.timed = Some(point);
        let now = self.step_seq;
        if let Some((at, admitted, steady)) = self.points.get_mut(&point) {
            if *at < now {
                *steady += 1;
            } else {
                *admitted = true;
            }
        }
        Ok(OpOutcome::ok(format!("timed {point}")))
    }

    pub(super) fn end_timed(&mut self, point: u64) -> Result<OpOutcome, Mismatch> {
        if self.timed != Some(point) {
            return Err(Mismatch(format!(
                "end of timed window {point} but {:?} is open",
                self.timed
            )));
        }
        self.timed = None;
        Ok(OpOutcome::ok(format!("untimed {point}")))
    }

    pub(super) fn inject_point(&mut self, point: u64, replica: bool) -> OpOutcome {
        let mut out = OpOutcome::ok(format!("inject {point}"));
        out.check(PlannerEvent::PointInjected {
            point,
            deadline_passed: self.deadline_passed,
            recorded_before: self.points_recorded,
        });
        self.points.entry(point).or_insert((self.step_seq, false, 0));
        if !replica {
            self.points_recorded += 1;
        }
        self.inject_seq = Some(self.step_seq);
        // The blocking stage exchange (PR #14728, dynamo_fpm.md §7.1, §8.2 bug 22):
        // every rank acts once every rank's message arrived, i.e. after the
        // group's largest lag; the non-blocking one acts on its own lag.
        let lag = if self.bug(BugMutant::NonblockingStageExchange) {
            self.message_lag
        } else {
            self.group_lag
        };
        if lag == 0 {
            self.injected = Some(point);
        } else {
            self.inject_queue.push((self.step_seq + lag, point));
            out.result = format!("inject {point} (delivered {lag} steps late)");
        }
        out
    }
}
