//! vLLM's free order (KV-FREE-ORDER, vllm_kv.md §1.5 `free_blocks`, §3.2 `free`, §6 deferred
//! frees): a request's blocks are freed tail first, and of those reaching ref 0 the unhashed
//! ones go to the front of the free queue (reused first) and the hashed ones to its back
//! (evicted last), each in freeing order. `free` makes one `free_blocks` call per group, in
//! group order, over the group's table reversed; a deferred free makes one call over the
//! reversed concatenation of the tables. The order is derived here from the tables as they
//! were before the free, not from the pool's own iteration, so a slip in either shows.

use super::PlannerEvent;
use crate::invariants::{InvariantId, Violation};
use crate::kv::NULL_BLOCK;

/// The free queue's expected (front, back) after the free: the blocks reaching ref 0 that
/// went to the front (front first) and those that went to the back (back last).
fn expected(tables: &[Vec<u32>], one_call: bool, goes_back: impl Fn(u32) -> Option<bool>) -> (Vec<u32>, Vec<u32>) {
    let calls: Vec<Vec<u32>> = if one_call {
        vec![tables.concat().into_iter().rev().collect()]
    } else {
        tables.iter().map(|t| t.iter().rev().copied().collect()).collect()
    };
    let (mut front, mut back) = (Vec::new(), Vec::new());
    for call in calls {
        let (mut first, mut last) = (Vec::new(), Vec::new());
        for b in call.into_iter().filter(|&b| b != NULL_BLOCK) {
            match goes_back(b) {
                Some(true) => last.push(b),
                Some(false) => first.push(b),
                None => {}
            }
        }
        // Each call's front run goes before everything already queued.
        front.splice(0..0, first);
        back.extend(last);
    }
    (front, back)
}

pub(super) fn check(event: &PlannerEvent<'_>) -> Option<Violation> {
    let PlannerEvent::RequestFreed {
        req,
        tables,
        one_call,
        queued,
        queue_front,
        queue_back,
    } = *event
    else {
        return None;
    };
    // `queued`: (block, went to the back) for every block that reached ref 0, by block id.
    let goes_back = |b: u32| queued.binary_search_by_key(&b, |&(id, _)| id).ok().map(|i| queued[i].1);
    let (front, back) = expected(tables, one_call, goes_back);
    let got_front: Vec<u32> = queue_front.iter().copied().take(front.len()).collect();
    let mut got_back: Vec<u32> = queue_back.iter().copied().take(back.len()).collect();
    got_back.reverse();
    if got_front == front && got_back == back {
        return None;
    }
    Some(Violation::new(
        InvariantId::KvFreeOrder,
        format!(
            "{req} freed out of vLLM's order: the free queue starts {got_front:?} and ends {got_back:?}, where the tables freed tail first give {front:?} in front and {back:?} at the back"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_first_unhashed_in_front_hashed_at_the_back() {
        // Group 0 [1, 2, 3] (1, 2 hashed), group 1 [0, 5, 6] (6 hashed); all reach ref 0.
        let tables = vec![vec![1, 2, 3], vec![0, 5, 6]];
        let hashed = |b: u32| Some([1, 2, 6].contains(&b));
        // One call per group: group 0 reversed → front [3], back [2, 1]; group 1 reversed →
        // front [5] before [3], back [.., 6].
        assert_eq!(expected(&tables, false, hashed), (vec![5, 3], vec![2, 1, 6]));
        // One call over the reversed concatenation [6, 5, 0, 3, 2, 1].
        assert_eq!(expected(&tables, true, hashed), (vec![5, 3], vec![6, 2, 1]));
        // A block still held elsewhere is not queued.
        let held = |b: u32| (b != 2).then_some([1, 6].contains(&b));
        assert_eq!(expected(&tables, false, held), (vec![5, 3], vec![1, 6]));
    }

    #[test]
    fn a_queue_in_another_order_is_a_violation() {
        let tables = [vec![1, 2, 3]];
        let queued = [(1, true), (2, true), (3, false)];
        let ev = |front: &[u32], back: &[u32]| {
            check(&PlannerEvent::RequestFreed {
                req: "r",
                tables: &tables,
                one_call: false,
                queued: &queued,
                queue_front: front,
                queue_back: back,
            })
        };
        // The queue's back is read back to front.
        assert_eq!(ev(&[3, 9], &[1, 2, 9]), None);
        let v = ev(&[3, 9], &[2, 1, 9]).expect("hashed blocks freed head first");
        assert_eq!(v.id, InvariantId::KvFreeOrder);
    }
}
