//! `steady` remembered per request. Between two changes to a request's entries, the
//! answer of `GroupManager::steady` for every group depends on the call only through
//! three numbers (the processed tokens, the slots asked for and the tokens to cache), each
//! compared with a bound the entries fix. `SteadyMemo` holds those bounds: a decode step
//! then asks three compares instead of walking every group. `ReqStates` drops the memo
//! whenever the entries are handed out mutably, so it never outlives what it describes.

use super::{GroupManager, GroupReq};
use crate::kv::block_pool::NULL_BLOCK;
use crate::kv::spec::GroupKind;

/// Bounds within which an `allocate_slots` without hits changes no group of the request
/// (outside Mamba "align" and slips): `holds_but_caching` and `caches_nothing` together
/// imply `steady` for every group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SteadyMemo {
    /// The processed tokens the windows' trimming finds nothing to free for (inclusive).
    processed: (u64, u64),
    /// The most slots every table covers already.
    slot_max: u64,
    /// Registering finds no block newly full below this many hashed, computed tokens.
    cache_below: u64,
}

impl SteadyMemo {
    /// A memo that holds for no call (some group has no table, or trims now).
    pub(crate) const NEVER: SteadyMemo = SteadyMemo {
        processed: (u64::MAX, 0),
        slot_max: 0,
        cache_below: 0,
    };

    /// Whether a call after `processed` tokens, asking for `need_slot` slots, trims no
    /// window and needs no block in any group (every group has a table): whatever it does
    /// is registering newly full blocks, and nothing if `caches_nothing` too.
    #[inline(always)]
    pub(crate) fn holds_but_caching(&self, processed: u64, need_slot: u64) -> bool {
        let (lo, hi) = self.processed;
        lo <= processed && processed <= hi && need_slot <= self.slot_max
    }

    /// Whether caching the first `cached` tokens (`None`: caching nothing) registers
    /// nothing new.
    #[inline(always)]
    pub(crate) fn caches_nothing(&self, cached: Option<u64>) -> bool {
        cached.is_none_or(|c| c < self.cache_below)
    }

    /// The bounds of the request's entries `states` (one per group of `groups`, none of
    /// them Mamba "align"), found at a call after `processed` tokens; `hash_block_size`
    /// is the model's.
    pub(crate) fn of(groups: &[GroupManager], states: &[GroupReq], processed: u64, hash_block_size: u64) -> Self {
        let mut memo = SteadyMemo {
            processed: (processed, u64::MAX),
            slot_max: u64::MAX,
            cache_below: u64::MAX,
        };
        for (m, st) in groups.iter().zip(states) {
            debug_assert!(!m.is_mamba_align());
            if !st.has_table {
                return Self::NEVER;
            }
            let (bs, len) = (m.spec.block_size, st.blocks.len() as u64);
            // `allocate_new_blocks` finds the table long enough up to len·bs slots.
            memo.slot_max = memo.slot_max.min(len.saturating_mul(bs));
            // `cache_blocks` finds no block newly full below (num_cached + 1)·bs tokens;
            // a partial tail to register is a change at any count.
            let cached = st.num_cached.unwrap_or(0) as u64;
            let below = if m.caches_partial_tail(hash_block_size) {
                0
            } else {
                cached.saturating_add(1).saturating_mul(bs)
            };
            memo.cache_below = memo.cache_below.min(below);
            if m.spec.kind.is_full_attention_spec() {
                continue;
            }
            // `remove_skipped_blocks` frees the last skipped block unless it is null; the
            // skipped blocks stay these n until the skipped tokens reach (n + 1)·bs.
            let skipped = m.spec.kind.skipped_tokens(processed as i64);
            let n = if skipped > 0 { (skipped as u64 / bs).min(len) } else { 0 };
            if n > 0 && st.blocks[n as usize - 1] != NULL_BLOCK {
                return Self::NEVER;
            }
            if n < len {
                let last = last_processed_skipping_below(m.spec.kind, (n + 1).saturating_mul(bs));
                memo.processed.1 = memo.processed.1.min(last);
            }
        }
        memo
    }
}

/// The most processed tokens whose skipped tokens (`GroupKind::skipped_tokens`) stay below
/// `limit` (at least 1); `u64::MAX` for kinds that skip nothing.
fn last_processed_skipping_below(kind: GroupKind, limit: u64) -> u64 {
    debug_assert!(limit >= 1);
    match kind {
        GroupKind::FullAttention | GroupKind::Mla => u64::MAX,
        // p - w + 1 < limit
        GroupKind::SlidingWindow { sliding_window } => (limit - 1).saturating_add(sliding_window.saturating_sub(1)),
        // ⌊p / c⌋·c < limit, i.e. ⌊p / c⌋ < ⌈limit / c⌉
        GroupKind::ChunkedLocal {
            attention_chunk_size: c,
        } => limit.div_ceil(c).saturating_mul(c) - 1,
        // p - 1 < limit
        GroupKind::Mamba { .. } => limit,
    }
}

#[cfg(test)]
mod tests {
    use super::last_processed_skipping_below;
    use crate::kv::spec::{GroupKind, MambaMode};

    #[test]
    fn the_last_processed_count_below_a_skip_limit_is_the_skipped_tokens_inverted() {
        let kinds = [
            GroupKind::FullAttention,
            GroupKind::Mla,
            GroupKind::SlidingWindow { sliding_window: 1 },
            GroupKind::SlidingWindow { sliding_window: 5 },
            GroupKind::SlidingWindow { sliding_window: 16 },
            GroupKind::ChunkedLocal {
                attention_chunk_size: 1,
            },
            GroupKind::ChunkedLocal {
                attention_chunk_size: 12,
            },
            GroupKind::ChunkedLocal {
                attention_chunk_size: 32,
            },
            GroupKind::Mamba {
                mamba_cache_mode: MambaMode::None,
            },
        ];
        for kind in kinds {
            for limit in 1..80u64 {
                let last = last_processed_skipping_below(kind, limit);
                let below = |p: u64| kind.skipped_tokens(p as i64) < limit as i64;
                if kind.is_full_attention_spec() {
                    assert_eq!(last, u64::MAX, "{kind:?}");
                    continue;
                }
                assert!((0..=last).all(below), "{kind:?} limit {limit}: up to {last}");
                assert!(!below(last + 1), "{kind:?} limit {limit}: {last} is not the last");
            }
        }
    }
}
