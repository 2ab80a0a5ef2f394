//! Reset refusal (KV-RESET, vllm_kv.md §1.5 `reset_prefix_cache`): vLLM refuses a prefix-cache
//! reset while any block other than the null block is in use (held by a request, by deferred
//! freeing or by a copy-on-write retention), and a reset it grants leaves no key behind. The
//! count of held blocks is taken here before the reset, not from the pool's own test (the
//! free queue's length), so a slip in either shows.

use super::PlannerEvent;
use crate::invariants::{InvariantId, Violation};

pub(super) fn check(event: &PlannerEvent<'_>) -> Option<Violation> {
    let PlannerEvent::PrefixCacheReset {
        done,
        held_before,
        keys_after,
    } = *event
    else {
        return None;
    };
    let detail = match (done, held_before) {
        (true, n) if n > 0 => format!("reset_prefix_cache succeeded with {n} blocks in use (vLLM refuses it)"),
        (false, 0) => "reset_prefix_cache was refused with no block in use".to_string(),
        (true, _) if keys_after > 0 => format!("reset_prefix_cache succeeded but left {keys_after} prefix-cache keys"),
        _ => return None,
    };
    Some(Violation::new(InvariantId::KvReset, detail))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reset(done: bool, held_before: usize, keys_after: usize) -> Option<Violation> {
        check(&PlannerEvent::PrefixCacheReset {
            done,
            held_before,
            keys_after,
        })
    }

    #[test]
    fn a_reset_is_refused_exactly_while_blocks_are_held() {
        assert_eq!(reset(false, 3, 5), None);
        assert_eq!(reset(true, 0, 0), None);
        assert_eq!(reset(true, 3, 0).map(|v| v.id), Some(InvariantId::KvReset));
        assert!(reset(false, 0, 5).is_some());
        assert!(reset(true, 0, 2).is_some());
    }
}
