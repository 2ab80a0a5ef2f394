//! Request ids interned to dense indices: replay state is indexed by them
//! instead of looked up by string. Each id keeps its JSON literal for the
//! observation lines, escaped once; names and literals share one buffer.

use std::collections::hash_map::Entry;
use std::ops::Range;

use super::json::push_str;
use crate::kv::hash::FastMap;

#[derive(Clone, Debug, Default)]
pub struct Ids {
    /// Ids of up to 7 bytes (nearly every id, e.g. "r12") by `packed` name: a probe
    /// hashes and compares one integer, and interning one allocates nothing.
    /// Only ever probed, never iterated.
    short: FastMap<u64, u32>,
    /// Longer ids by name. Only ever probed, never iterated.
    long: FastMap<String, u32>,
    /// Every id's name and JSON literal, back to back.
    text: String,
    /// Per id: where its name and its literal are in `text`.
    spans: Vec<(Range<usize>, Range<usize>)>,
    /// Per id: its place among all ids in name order, once `rank_names` has run
    /// over every id (a replay then orders live ids by integers, not names).
    ranks: Vec<u32>,
}

fn offset_of(n: usize) -> u32 {
    u32::try_from(n).expect("fewer than 2^32 request ids")
}

/// A name of up to 7 bytes as an integer in the names' order: its bytes from the
/// top (zero padded), then its length in the low byte (a name sorts before any
/// longer name it begins, NUL bytes included); `None` for longer names.
fn order_key(name: &str) -> Option<u64> {
    let b = name.as_bytes();
    if b.len() > 7 {
        return None;
    }
    let bytes = b
        .iter()
        .enumerate()
        .fold(0u64, |word, (i, &x)| word | u64::from(x) << (56 - 8 * i));
    Some(bytes | b.len() as u64)
}

/// A name of up to 7 bytes as one word: its bytes, then its length in the top
/// byte (so "a" and "a\0" differ); `None` for longer names.
fn packed(name: &str) -> Option<u64> {
    let b = name.as_bytes();
    if b.len() > 7 {
        return None;
    }
    // Byte by byte: a copy of a variable-length slice would be a memcpy call.
    let bytes = b.iter().rev().fold(0u64, |word, &x| (word << 8) | u64::from(x));
    Some(bytes | (b.len() as u64) << 56)
}

/// A new id's name and JSON literal appended to `text`, with where they are.
fn push_text(text: &mut String, spans: &mut Vec<(Range<usize>, Range<usize>)>, name: &str) {
    let start = text.len();
    text.push_str(name);
    let mid = text.len();
    push_str(text, name);
    spans.push((start..mid, mid..text.len()));
}

impl Ids {
    /// The index of `name`, allocating the next one on first sight.
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(k) = self.get(name) {
            return k;
        }
        let k = offset_of(self.spans.len());
        push_text(&mut self.text, &mut self.spans, name);
        match packed(name) {
            Some(word) => self.short.insert(word, k),
            None => self.long.insert(name.to_string(), k),
        };
        k
    }

    /// `intern(name)` for a name of up to 7 bytes whose `packed` word the
    /// caller already holds (the text compiler reads it in one load); `name`
    /// is only asked for when the id is new.
    #[inline]
    pub fn intern_short<'s>(&mut self, word: u64, name: impl FnOnce() -> &'s str) -> u32 {
        let next = offset_of(self.spans.len());
        match self.short.entry(word) {
            Entry::Occupied(e) => *e.get(),
            // One probe for a new id too: its slot is filled in place.
            Entry::Vacant(e) => {
                let name = name();
                debug_assert_eq!(packed(name), Some(word), "{name:?}");
                e.insert(next);
                push_text(&mut self.text, &mut self.spans, name);
                next
            }
        }
    }

    /// Room for `n` more ids.
    pub fn reserve(&mut self, n: usize) {
        self.short.reserve(n);
        self.spans.reserve(n);
        self.text.reserve(8 * n);
    }

    pub fn get(&self, name: &str) -> Option<u32> {
        match packed(name) {
            Some(word) => self.short.get(&word),
            None => self.long.get(name),
        }
        .copied()
    }

    /// Ids interned so far (the text compiler's tests compare id tables).
    #[cfg(test)]
    pub fn count(&self) -> usize {
        self.spans.len()
    }

    /// Rank every id interned so far by name (a compiled trace's ids are then final).
    pub fn rank_names(&mut self) {
        let n = self.spans.len();
        // Ids of up to 7 bytes (nearly all) sort as one integer each (`order_key`).
        let mut keyed: Vec<(u64, u32)> = Vec::with_capacity(n);
        for k in 0..offset_of(n) {
            match order_key(self.name(k)) {
                Some(key) => keyed.push((key, k)),
                None => break,
            }
        }
        let by_name: Vec<u32> = if keyed.len() == n {
            keyed.sort_unstable();
            keyed.iter().map(|&(_, k)| k).collect()
        } else {
            let mut ids: Vec<u32> = (0..offset_of(n)).collect();
            ids.sort_unstable_by(|&a, &b| self.name(a).cmp(self.name(b)));
            ids
        };
        self.ranks.clear();
        self.ranks.resize(n, 0);
        for (r, &k) in by_name.iter().enumerate() {
            self.ranks[k as usize] = offset_of(r);
        }
    }

    /// Each id's rank in name order (`a < b` iff `name(a) < name(b)`), when every
    /// interned id is ranked; `None` while ids are still being interned.
    #[inline]
    pub fn ranks(&self) -> Option<&[u32]> {
        (self.ranks.len() == self.spans.len()).then_some(&self.ranks)
    }

    pub fn name(&self, k: u32) -> &str {
        &self.text[self.spans[k as usize].0.clone()]
    }

    /// The id as a JSON string literal (quotes included).
    pub fn literal(&self, k: u32) -> &str {
        &self.text[self.spans[k as usize].1.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::Ids;

    #[test]
    fn short_and_long_names_intern_apart_and_back() {
        let names = ["r1", "r1\0", "r10", "", "a", "\0", "seven77", "eight888", "é", "r1 "];
        let mut ids = Ids::default();
        let ks: Vec<u32> = names.iter().map(|n| ids.intern(n)).collect();
        assert_eq!(ks, (0..names.len() as u32).collect::<Vec<_>>(), "every name is new");
        for (n, k) in names.iter().zip(ks) {
            assert_eq!((ids.intern(n), ids.get(n), ids.name(k)), (k, Some(k), *n));
        }
        assert_eq!(ids.get("r2"), None);
        for n in ["r1", "seven77", "", "é", "new7"] {
            let word = super::packed(n).unwrap();
            let k = ids.intern_short(word, || n);
            assert_eq!((ids.get(n), ids.name(k)), (Some(k), n));
        }
        assert_eq!(ids.count(), names.len() + 1, "only new7 is new");
        assert_eq!(ids.literal(ids.get("é").unwrap()), "\"\\u00e9\"");
    }

    #[test]
    fn short_names_rank_like_strings() {
        let names = [
            "r10", "r2", "", "r1", "é", "a", "r1\0", "r1\0\0", "\0", "R9", "seven77", "\u{ff}",
        ];
        let mut ids = Ids::default();
        for n in names {
            ids.intern(n);
        }
        ids.rank_names();
        let ranks = ids.ranks().expect("ranked");
        for a in 0..names.len() as u32 {
            for b in 0..names.len() as u32 {
                let by_name = ids.name(a).cmp(ids.name(b));
                assert_eq!(ranks[a as usize].cmp(&ranks[b as usize]), by_name, "{a} {b}");
            }
        }
    }

    #[test]
    fn ranks_follow_name_order_once_every_id_is_ranked() {
        let names = ["r10", "r2", "", "r1", "é", "a", "r1\0", "eight888", "R9"];
        let mut ids = Ids::default();
        for n in &names[..4] {
            ids.intern(n);
        }
        assert!(ids.ranks().is_none(), "not ranked yet");
        ids.rank_names();
        for n in &names[4..] {
            ids.intern(n);
        }
        assert!(ids.ranks().is_none(), "ids interned after ranking are not ranked");
        ids.rank_names();
        let ranks = ids.ranks().expect("ranked").to_vec();
        for a in 0..names.len() as u32 {
            for b in 0..names.len() as u32 {
                let by_name = ids.name(a).cmp(ids.name(b));
                assert_eq!(ranks[a as usize].cmp(&ranks[b as usize]), by_name, "{a} {b}");
            }
        }
    }
}
