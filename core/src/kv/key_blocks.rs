//! The block ids registered under one prefix-cache key, first-inserted first.
//! Nearly always a single block, so up to three are kept inline: caching a
//! block then allocates nothing.

/// Blocks cached under one key (duplicates allowed): up to three inline.
#[derive(Clone, Debug)]
pub enum KeyBlocks {
    /// Up to three, inline.
    Inline {
        /// How many.
        len: u8,
        /// The ids.
        ids: [u32; 3],
    },
    /// More than three.
    Heap(Vec<u32>),
}

impl KeyBlocks {
    /// No block (an empty slot's placeholder in `KeyMap`).
    pub const EMPTY: KeyBlocks = KeyBlocks::Inline { len: 0, ids: [0; 3] };

    /// One block.
    pub fn one(id: u32) -> Self {
        KeyBlocks::Inline {
            len: 1,
            ids: [id, 0, 0],
        }
    }

    /// The blocks, in insertion order.
    #[inline]
    pub fn as_slice(&self) -> &[u32] {
        match self {
            KeyBlocks::Inline { len, ids } => &ids[..*len as usize],
            KeyBlocks::Heap(v) => v,
        }
    }

    /// The first inserted (what a lookup returns).
    #[inline]
    pub fn first(&self) -> u32 {
        self.as_slice()[0]
    }

    /// Whether `id` is among them.
    #[inline]
    pub fn contains(&self, id: u32) -> bool {
        self.as_slice().contains(&id)
    }

    /// Exactly `id` and no other block.
    #[inline]
    pub fn is_only(&self, id: u32) -> bool {
        matches!(self, KeyBlocks::Inline { len: 1, ids } if ids[0] == id)
    }

    /// No block.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    /// Add `id`.
    pub fn push(&mut self, id: u32) {
        match self {
            KeyBlocks::Inline { len, ids } if (*len as usize) < ids.len() => {
                ids[*len as usize] = id;
                *len += 1;
            }
            KeyBlocks::Inline { ids, .. } => {
                let mut v = ids.to_vec();
                v.push(id);
                *self = KeyBlocks::Heap(v);
            }
            KeyBlocks::Heap(v) => v.push(id),
        }
    }

    /// Remove `id`, keeping the others' order; false if it is not here.
    pub fn remove(&mut self, id: u32) -> bool {
        let Some(pos) = self.as_slice().iter().position(|&b| b == id) else {
            return false;
        };
        match self {
            KeyBlocks::Inline { len, ids } => {
                ids.copy_within(pos + 1..*len as usize, pos);
                *len -= 1;
            }
            KeyBlocks::Heap(v) => {
                v.remove(pos);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_insertion_order_inline_and_on_the_heap() {
        let mut k = KeyBlocks::one(5);
        for id in [6, 7, 8, 9] {
            k.push(id);
        }
        assert_eq!(k.as_slice(), [5, 6, 7, 8, 9]);
        assert!(k.remove(7) && !k.remove(7));
        assert_eq!(k.as_slice(), [5, 6, 8, 9]);
        let mut k = KeyBlocks::one(1);
        k.push(2);
        k.push(3);
        assert!(k.remove(1));
        assert_eq!((k.first(), k.as_slice()), (2, &[2, 3][..]));
        assert!(k.remove(2) && k.remove(3) && k.is_empty());
        let one = KeyBlocks::one(4);
        assert!(one.is_only(4) && !one.is_only(5), "one block");
        let mut two = KeyBlocks::one(4);
        two.push(5);
        assert!(!two.is_only(4) && !two.is_only(5), "two blocks");
    }
}
