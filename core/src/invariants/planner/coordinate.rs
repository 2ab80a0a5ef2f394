//! The benchmark coordinate (PL-COORDINATE, dynamo_fpm.md §1.10 step 2, §8.1 invariants 6 and
//! 15): a decode point's requests are admitted one token short of their contexts, and each
//! timed step reads the coordinate's context. A point of B requests at steady coordinate v has
//! the balanced contexts ctx_i of v (min 1 each); at its admission forward request i has
//! computed exactly max(1, ctx_i − 1) tokens, and at its k-th steady forward that plus k.
//!
//! The expected lengths are derived here from the point alone, independently of the planners'
//! own admission arithmetic (`fpm::grid::decode_admission`), so a slip there shows.

use super::PlannerEvent;
use crate::invariants::{InvariantId, Violation};

/// What a plan says a decode point's coordinate is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PointCoordinate {
    /// kvsim's plans: the grid point (`batch_size`, steady `total_kv_read_tokens`).
    Grid {
        /// The batch size.
        batch: u64,
        /// The steady total KV read.
        total_kv: u64,
    },
    /// Recorded plans: the admitted lengths the real planner reported (spec/plan.md §7).
    Admitted(Vec<u64>),
}

impl PointCoordinate {
    /// Each request's computed tokens at the admission forward, sorted; `None` when the grid
    /// point has no balanced partition (fewer tokens than requests).
    pub fn admitted(&self) -> Option<Vec<u64>> {
        let mut v = match self {
            PointCoordinate::Admitted(v) => v.clone(),
            &PointCoordinate::Grid { batch, total_kv } => {
                if batch == 0 || total_kv < batch {
                    return None;
                }
                let (q, r) = (total_kv / batch, total_kv % batch);
                (0..batch)
                    .map(|i| if i < r { q + 1 } else { q })
                    .map(|ctx| ctx.saturating_sub(1).max(1))
                    .collect()
            }
        };
        v.sort_unstable();
        Some(v)
    }
}

pub(super) fn check(event: &PlannerEvent<'_>) -> Option<Violation> {
    let PlannerEvent::TimedForward {
        point,
        steady,
        computed,
        coordinate,
    } = *event
    else {
        return None;
    };
    let expected: Vec<u64> = coordinate.admitted()?.iter().map(|a| a + steady).collect();
    let mut actual = computed.to_vec();
    actual.sort_unstable();
    if actual == expected {
        return None;
    }
    let which = if steady == 0 {
        "its admission step".to_string()
    } else {
        format!("steady step {steady}")
    };
    Some(Violation::new(
        InvariantId::PlCoordinate,
        format!(
            "point {point}: {which} reads computed contexts {} where its coordinate gives {}",
            short(&actual),
            short(&expected)
        ),
    ))
}

/// A list, cut after a few entries (reports stay one line).
fn short(v: &[u64]) -> String {
    const SHOWN: usize = 8;
    let head: Vec<String> = v.iter().take(SHOWN).map(u64::to_string).collect();
    let more = if v.len() > SHOWN {
        format!(", … {} in all", v.len())
    } else {
        String::new()
    };
    format!("[{}{more}]", head.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_is_one_short_of_the_balanced_contexts() {
        // v = 10 over 3 requests: contexts 4, 3, 3 → admitted 3, 2, 2.
        let c = PointCoordinate::Grid { batch: 3, total_kv: 10 };
        assert_eq!(c.admitted(), Some(vec![2, 2, 3]));
        // Context 1 is clamped to one admitted token (context_clamped).
        let c = PointCoordinate::Grid { batch: 2, total_kv: 2 };
        assert_eq!(c.admitted(), Some(vec![1, 1]));
        assert_eq!(PointCoordinate::Grid { batch: 4, total_kv: 3 }.admitted(), None);
    }

    #[test]
    fn a_step_off_the_coordinate_is_a_violation() {
        let coordinate = PointCoordinate::Grid { batch: 2, total_kv: 8 };
        let ev = |steady, computed: &[u64]| {
            check(&PlannerEvent::TimedForward {
                point: 7,
                steady,
                computed,
                coordinate: &coordinate,
            })
        };
        assert_eq!(ev(0, &[3, 3]), None);
        assert_eq!(ev(1, &[4, 4]), None);
        assert_eq!(ev(2, &[5, 5]), None);
        let v = ev(0, &[4, 4]).expect("admitted at the context, not one short");
        assert_eq!(v.id, InvariantId::PlCoordinate);
        assert!(v
            .detail
            .contains("admission step reads computed contexts [4, 4] where its coordinate gives [3, 3]"));
        assert!(ev(1, &[4]).is_some(), "a request missing from the batch");
        assert!(ev(1, &[4, 4, 4]).is_some(), "a request too many");
    }
}
