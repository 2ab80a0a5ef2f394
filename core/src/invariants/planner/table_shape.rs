//! Table shape per group kind (KV-TABLE-SHAPE, vllm_kv.md §3.2 `remove_skipped_blocks`, §3.4,
//! §3.5, §3.6 align mode): right after `allocate_slots` freed what left each group's reach
//! below the processed tokens (computed and hit, less those still in flight), a
//! sliding-window or chunked-local table is null below its window edge and holds a block at
//! every entry from the edge up, and an align-mode Mamba table is null below the state of the
//! last processed token (the previous state, the states being written by steps in flight and
//! the new running state are all that remain). The edge is computed here from the kind alone,
//! not by the manager's own `skipped_tokens`, so a slip in either shows; blocks freed from
//! above the edge (as freeing below the computed tokens, in-flight ones included, does) show
//! as holes.

use super::PlannerEvent;
use crate::invariants::{InvariantId, Violation};
use crate::kv::{GroupKind, MambaMode, NULL_BLOCK};

/// Tokens whose blocks a group must have dropped once `processed` tokens are processed.
fn skipped_tokens(kind: GroupKind, processed: u64) -> u64 {
    match kind {
        GroupKind::SlidingWindow { sliding_window } => (processed + 1).saturating_sub(sliding_window),
        GroupKind::ChunkedLocal { attention_chunk_size } => processed / attention_chunk_size * attention_chunk_size,
        // The state after token `processed` is the one a read needs; all before it can go.
        GroupKind::Mamba {
            mamba_cache_mode: MambaMode::Align,
        } => processed.saturating_sub(1),
        _ => 0,
    }
}

pub(super) fn check(event: &PlannerEvent<'_>) -> Option<Violation> {
    let PlannerEvent::TablesShaped { req, processed, groups } = *event else {
        return None;
    };
    for (g, &(kind, bs, table)) in groups.iter().enumerate() {
        let below = ((skipped_tokens(kind, processed) / bs) as usize).min(table.len());
        if let Some(i) = table[..below].iter().position(|&b| b != NULL_BLOCK) {
            return Some(Violation::new(
                InvariantId::KvTableShape,
                format!(
                    "{req}: {} group {g} still holds block {} at index {i}, below its edge (index {below} with {processed} tokens processed)",
                    kind.name(),
                    table[i]
                ),
            ));
        }
        let windowed = matches!(kind, GroupKind::SlidingWindow { .. } | GroupKind::ChunkedLocal { .. });
        if let Some(i) = table[below..]
            .iter()
            .position(|&b| b == NULL_BLOCK)
            .filter(|_| windowed)
        {
            return Some(Violation::new(
                InvariantId::KvTableShape,
                format!(
                    "{req}: {} group {g} has no block at index {}, inside its window (edge at index {below} with {processed} tokens processed)",
                    kind.name(),
                    below + i
                ),
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shaped(kind: GroupKind, processed: u64, table: &[u32]) -> Option<Violation> {
        check(&PlannerEvent::TablesShaped {
            req: "r",
            processed,
            groups: &[(kind, 4, table)],
        })
    }

    #[test]
    fn a_window_table_is_null_below_its_edge() {
        let swa = GroupKind::SlidingWindow { sliding_window: 4 };
        // 11 processed, window 4: positions 0..8 left the window, blocks 0 and 1.
        assert_eq!(shaped(swa, 11, &[0, 0, 7, 8]), None);
        let v = shaped(swa, 11, &[0, 6, 7, 8]).expect("block 6 is below the window");
        assert_eq!(v.id, InvariantId::KvTableShape);
        assert!(v.detail.contains("block 6 at index 1"), "{}", v.detail);
        // A hole from the edge up: a block freed that the window still covers.
        assert!(shaped(swa, 11, &[0, 0, 0, 8]).is_some());
        let chunked = GroupKind::ChunkedLocal {
            attention_chunk_size: 8,
        };
        assert_eq!(shaped(chunked, 17, &[0, 0, 0, 0, 9]), None);
        assert!(shaped(chunked, 17, &[0, 0, 0, 5, 9]).is_some());
        assert_eq!(shaped(GroupKind::FullAttention, 100, &[1, 2, 3]), None);
    }

    #[test]
    fn an_align_table_is_null_below_the_last_processed_state() {
        let align = GroupKind::Mamba {
            mamba_cache_mode: MambaMode::Align,
        };
        // 12 processed, block 4: the state after token 12 sits at index 2; index 0 and 1 go.
        assert_eq!(shaped(align, 12, &[0, 0, 5, 6]), None);
        assert!(shaped(align, 12, &[4, 0, 5, 6]).is_some());
        // Steps in flight keep their states: 3 blocks at and above the processed state.
        assert_eq!(shaped(align, 8, &[0, 5, 6, 7]), None);
    }
}
