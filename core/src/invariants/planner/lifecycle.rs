//! The sweep leaves nothing behind (PL-CLEAN-END): no block referenced, no prefix-cache key.

use super::PlannerEvent;
use crate::invariants::{InvariantId, Violation};

pub(super) fn check(event: &PlannerEvent<'_>) -> Option<Violation> {
    match *event {
        PlannerEvent::Leftovers {
            when,
            held,
            cached_keys,
        } if !held.is_empty() || cached_keys > 0 => Some(Violation::new(
            InvariantId::PlCleanEnd,
            format!(
                "{when} {} blocks are referenced (first {:?}) and {cached_keys} prefix-cache keys remain",
                held.len(),
                &held[..held.len().min(5)],
            ),
        )),
        _ => None,
    }
}
