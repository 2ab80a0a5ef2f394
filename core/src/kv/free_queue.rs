//! vLLM's `FreeKVCacheBlockQueue` (vllm_kv.md §1.2): an index-linked doubly-linked
//! list over block ids. The front is evicted (handed out) first.

const NIL: u32 = u32::MAX;

/// vLLM's free-block queue: a doubly linked list over block ids in eviction order, with O(1) removal from the middle.
#[derive(Debug)]
pub struct FreeQueue {
    prev: Vec<u32>,
    next: Vec<u32>,
    linked: Vec<bool>,
    head: u32,
    tail: u32,
    len: usize,
    /// Bumped by every change: observers re-render the queue only then.
    version: u64,
}

reuse_clone!(FreeQueue {
    prev,
    next,
    linked,
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
            prev: Vec::new(),
            next: Vec::new(),
            linked: Vec::new(),
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
        for v in [&mut self.prev, &mut self.next] {
            v.clear();
            v.resize(capacity, NIL);
        }
        self.linked.clear();
        self.linked.resize(capacity, false);
        (self.head, self.tail, self.len, self.version) = (NIL, NIL, 0, 0);
        if start >= end {
            return;
        }
        for i in start..end {
            self.prev[i] = if i == start { NIL } else { i as u32 - 1 };
            self.next[i] = if i + 1 == end { NIL } else { i as u32 + 1 };
        }
        self.linked[start..end].iter_mut().for_each(|l| *l = true);
        (self.head, self.tail) = (ids.start, ids.end - 1);
        self.len = end - start;
        self.version = (end - start) as u64;
    }

    /// A queue holding `ids` in order, room for `capacity` ids.
    pub fn new(capacity: usize, ids: impl IntoIterator<Item = u32>) -> Self {
        let mut q = FreeQueue {
            prev: vec![NIL; capacity],
            next: vec![NIL; capacity],
            linked: vec![false; capacity],
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
    pub fn contains(&self, id: u32) -> bool {
        self.linked[id as usize]
    }

    /// Append `id` (the LRU end). Inlined, like `push_front` and `remove`: each is a
    /// few stores run once per block freed or drawn, where a call cost a third more.
    #[inline(always)]
    pub fn push_back(&mut self, id: u32) {
        let i = id as usize;
        if self.linked[i] {
            return; // only reachable in a deliberately corrupted model
        }
        self.prev[i] = self.tail;
        self.next[i] = NIL;
        if self.tail == NIL {
            self.head = id;
        } else {
            self.next[self.tail as usize] = id;
        }
        self.tail = id;
        self.linked[i] = true;
        self.len += 1;
        self.version += 1;
    }

    /// Prepend `id` (handed out next).
    #[inline(always)]
    pub fn push_front(&mut self, id: u32) {
        let i = id as usize;
        if self.linked[i] {
            return; // only reachable in a deliberately corrupted model
        }
        self.next[i] = self.head;
        self.prev[i] = NIL;
        if self.head == NIL {
            self.tail = id;
        } else {
            self.prev[self.head as usize] = id;
        }
        self.head = id;
        self.linked[i] = true;
        self.len += 1;
        self.version += 1;
    }

    /// `prepend_n`: `ids[0]` becomes the new front.
    #[inline]
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
        let i = id as usize;
        if !self.linked[i] {
            return false;
        }
        let (p, n) = (self.prev[i], self.next[i]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[i] = NIL;
        self.next[i] = NIL;
        self.linked[i] = false;
        self.len -= 1;
        self.version += 1;
        true
    }

    /// Take the head: `remove` of a block known to be linked and to have no predecessor.
    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<u32> {
        let h = self.head;
        if h == NIL {
            return None;
        }
        let i = h as usize;
        let n = self.next[i];
        self.head = n;
        if n == NIL {
            self.tail = NIL;
        } else {
            self.prev[n as usize] = NIL;
        }
        self.next[i] = NIL;
        self.linked[i] = false;
        self.len -= 1;
        self.version += 1;
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
            cur = self.prev[id as usize];
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
            cur = self.next[id as usize];
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
            assert_eq!((a.prev, a.next, a.linked), (b.prev, b.next, b.linked), "{r:?}");
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
