//! vLLM's `FreeKVCacheBlockQueue` (vllm_kv.md §1.2): an index-linked doubly-linked
//! list over block ids. The front is evicted (handed out) first.

use super::bump;

const NIL: u32 = u32::MAX;
/// `next` of a block not in the queue (a linked tail's is `NIL`).
const OFF: u32 = u32::MAX - 1;

/// A block's neighbours in the queue, kept together: each link or unlink reads and
/// writes one entry (one bounds check), not three parallel columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Link {
    prev: u32,
    next: u32,
}

/// The entry of a block not in the queue.
const UNLINKED: Link = Link { prev: NIL, next: OFF };

/// vLLM's free-block queue: a doubly linked list over block ids in eviction order, with O(1) removal from the middle.
#[derive(Debug)]
pub struct FreeQueue {
    links: Vec<Link>,
    head: u32,
    tail: u32,
    len: usize,
    /// Bumped by every change: observers re-render the queue only then.
    version: u64,
}

reuse_clone!(FreeQueue {
    links,
    head,
    tail,
    len,
    version
});

impl FreeQueue {
    /// A queue holding `ids` in the given order, over an id space of `capacity`.
    /// The common case (one run of consecutive ids) is linked in one pass over plain
    /// vectors: a fresh pool's queue costs what its memory does.
    pub fn with_range(capacity: usize, ids: std::ops::Range<u32>) -> Self {
        let mut q = FreeQueue {
            links: Vec::new(),
            head: NIL,
            tail: NIL,
            len: 0,
            version: 0,
        };
        q.reset_range(capacity, ids);
        q
    }

    /// Become `with_range(capacity, ids)`, reusing this queue's storage.
    pub fn reset_range(&mut self, capacity: usize, ids: std::ops::Range<u32>) {
        let (start, end) = (ids.start as usize, ids.end as usize);
        self.links.clear();
        self.links.resize(capacity, UNLINKED);
        (self.head, self.tail, self.len, self.version) = (NIL, NIL, 0, 0);
        if start >= end {
            return;
        }
        for (i, l) in self.links[start..end].iter_mut().enumerate() {
            let id = (start + i) as u32;
            l.prev = if i == 0 { NIL } else { id - 1 };
            l.next = if id + 1 == ids.end { NIL } else { id + 1 };
        }
        (self.head, self.tail) = (ids.start, ids.end - 1);
        self.len = end - start;
        self.version = (end - start) as u64;
    }

    /// A queue holding `ids` in order, room for `capacity` ids.
    pub fn new(capacity: usize, ids: impl IntoIterator<Item = u32>) -> Self {
        let mut q = FreeQueue {
            links: vec![UNLINKED; capacity],
            head: NIL,
            tail: NIL,
            len: 0,
            version: 0,
        };
        for id in ids {
            q.push_back(id);
        }
        q
    }

    /// Blocks queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// No block queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A counter bumped on every change.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether `id` is queued.
    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        self.links[id as usize].next != OFF
    }

    /// Append `id` (the LRU end). Inlined, like `push_front` and `remove`: each is a
    /// few stores run once per block freed or drawn, where a call cost a third more.
    #[inline(always)]
    pub fn push_back(&mut self, id: u32) {
        let link = &mut self.links[id as usize];
        if link.next != OFF {
            return; // only reachable in a deliberately corrupted model
        }
        *link = Link {
            prev: self.tail,
            next: NIL,
        };
        if self.tail == NIL {
            self.head = id;
        } else {
            self.links[self.tail as usize].next = id;
        }
        self.tail = id;
        self.len += 1;
        bump(&mut self.version, 1);
    }

    /// Prepend `id` (handed out next).
    #[inline(always)]
    pub fn push_front(&mut self, id: u32) {
        let link = &mut self.links[id as usize];
        if link.next != OFF {
            return; // only reachable in a deliberately corrupted model
        }
        *link = Link {
            prev: NIL,
            next: self.head,
        };
        if self.head == NIL {
            self.tail = id;
        } else {
            self.links[self.head as usize].prev = id;
        }
        self.head = id;
        self.len += 1;
        bump(&mut self.version, 1);
    }

    /// `prepend_n`: `ids[0]` becomes the new front.
    #[inline(always)]
    pub fn prepend(&mut self, ids: &[u32]) {
        for &id in ids.iter().rev() {
            self.push_front(id);
        }
    }

    /// `append_n`: links `ids` in order before the tail.
    #[inline]
    pub fn append(&mut self, ids: &[u32]) {
        for &id in ids {
            self.push_back(id);
        }
    }

    /// `remove`: unlink from anywhere in O(1). Returns false if not linked.
    #[inline(always)]
    pub fn remove(&mut self, id: u32) -> bool {
        let Link { prev: p, next: n } = self.links[id as usize];
        if n == OFF {
            return false;
        }
        if p == NIL {
            self.head = n;
        } else {
            self.links[p as usize].next = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.links[n as usize].prev = p;
        }
        self.links[id as usize] = UNLINKED;
        self.len -= 1;
        bump(&mut self.version, 1);
        true
    }

    /// Take the head: `remove` of a block known to be linked and to have no predecessor.
    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<u32> {
        let h = self.head;
        if h == NIL {
            return None;
        }
        let link = &mut self.links[h as usize];
        let n = link.next;
        *link = UNLINKED;
        self.head = n;
        if n == NIL {
            self.tail = NIL;
        } else {
            self.links[n as usize].prev = NIL;
        }
        self.len -= 1;
        bump(&mut self.version, 1);
        Some(h)
    }

    /// Back-to-front ids (the most recently appended first).
    pub fn iter_back(&self) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.tail;
        std::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let id = cur;
            cur = self.links[id as usize].prev;
            Some(id)
        })
    }

    /// Front-to-back ids (the observation's `free_queue`).
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let mut cur = self.head;
        std::iter::from_fn(move || {
            if cur == NIL {
                return None;
            }
            let id = cur;
            cur = self.links[id as usize].next;
            Some(id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_queue_is_the_queue_pushed_one_by_one() {
        let mut used = FreeQueue::new(20, [4, 2, 9, 13]);
        for (cap, r) in [(10, 1..10), (10, 0..10), (10, 3..4), (10, 5..5)] {
            let (a, b) = (FreeQueue::with_range(cap, r.clone()), FreeQueue::new(cap, r.clone()));
            assert_eq!(a.iter().collect::<Vec<_>>(), b.iter().collect::<Vec<_>>());
            assert_eq!((a.len(), a.head, a.tail), (b.len(), b.head, b.tail), "{r:?}");
            assert_eq!(a.version, b.version, "{r:?}");
            used.reset_range(cap, r.clone());
            assert_eq!(
                format!("{used:?}"),
                format!("{a:?}"),
                "a reset queue is a fresh one: {r:?}"
            );
            assert_eq!(a.links, b.links, "{r:?}");
        }
    }

    #[test]
    fn prepend_puts_first_element_in_front_and_append_keeps_order() {
        let mut q = FreeQueue::new(10, [1, 2, 3]);
        q.prepend(&[7, 8]);
        q.append(&[5, 4]);
        assert_eq!(q.iter().collect::<Vec<_>>(), [7, 8, 1, 2, 3, 5, 4]);
        assert_eq!(q.iter_back().collect::<Vec<_>>(), [4, 5, 3, 2, 1, 8, 7]);
        assert!(q.remove(2));
        assert!(!q.remove(2));
        assert_eq!(q.pop_front(), Some(7));
        assert_eq!(q.iter().collect::<Vec<_>>(), [8, 1, 3, 5, 4]);
        assert_eq!(q.len(), 5);
    }
}
