//! Request ids interned to dense indices: replay state is indexed by them
//! instead of looked up by string. Each id keeps its JSON literal for the
//! observation lines, escaped once; names and literals share one buffer.

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

impl Ids {
    /// The index of `name`, allocating the next one on first sight.
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(k) = self.get(name) {
            return k;
        }
        let k = u32::try_from(self.spans.len()).expect("fewer than 2^32 request ids");
        let start = self.text.len();
        self.text.push_str(name);
        let mid = self.text.len();
        push_str(&mut self.text, name);
        self.spans.push((start..mid, mid..self.text.len()));
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
        match self.short.get(&word) {
            Some(&k) => k,
            None => {
                let name = name();
                debug_assert_eq!(packed(name), Some(word), "{name:?}");
                self.intern(name)
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
}
