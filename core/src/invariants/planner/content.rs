//! No eviction before the window (PL-WINDOW): every read finds the content its reader
//! expects, and no shadow forks its tail from a block the window already dropped.

use super::PlannerEvent;
use crate::invariants::{InvariantId, Violation};

pub(super) fn check(event: &PlannerEvent<'_>) -> Option<Violation> {
    use PlannerEvent as E;
    let window = |detail| Some(Violation::new(InvariantId::PlWindow, detail));
    match *event {
        E::StateRead {
            req,
            group,
            depth,
            block,
            holds: false,
        } => window(format!(
            "{req} reads recurrent state of group {group} at depth {depth} from block {block}, which holds other content"
        )),
        E::AttentionRead {
            req,
            block,
            index,
            group,
            kind,
            below,
            holds: false,
        } => window(format!(
            "{req} reads block {block} (index {index}) of group {group} ({kind}) for positions below {below}; it was freed, evicted or overwritten"
        )),
        // The chain's block there was dropped by the window (or is the null padding of a
        // prefix hit): the fork would copy nothing (dynamo_planner_on_cpu.md, "A failure seen
        // on the first try").
        E::TailForked {
            shadow,
            group,
            ctx,
            from_null: true,
        } => window(format!(
            "shadow {shadow} forks its group-{group} tail from the null block: the chain's history at ctx {ctx} was already dropped"
        )),
        _ => None,
    }
}
