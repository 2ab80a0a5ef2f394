//! Request ids interned to dense indices: replay state is indexed by them
//! instead of looked up by string. Each id keeps its JSON literal for the
//! observation lines, escaped once; names and literals share one buffer.

use std::ops::Range;

use super::json::push_str;
use crate::kv::hash::FastMap;

#[derive(Clone, Debug, Default)]
pub struct Ids {
    /// Only ever probed, never iterated.
    index: FastMap<String, u32>,
    /// Every id's name and JSON literal, back to back.
    text: String,
    /// Per id: where its name and its literal are in `text`.
    spans: Vec<(Range<usize>, Range<usize>)>,
}

impl Ids {
    /// The index of `name`, allocating the next one on first sight.
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(&k) = self.index.get(name) {
            return k;
        }
        let k = u32::try_from(self.spans.len()).expect("fewer than 2^32 request ids");
        let start = self.text.len();
        self.text.push_str(name);
        let mid = self.text.len();
        push_str(&mut self.text, name);
        self.spans.push((start..mid, mid..self.text.len()));
        self.index.insert(name.to_string(), k);
        k
    }

    pub fn get(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    pub fn name(&self, k: u32) -> &str {
        &self.text[self.spans[k as usize].0.clone()]
    }

    /// The id as a JSON string literal (quotes included).
    pub fn literal(&self, k: u32) -> &str {
        &self.text[self.spans[k as usize].1.clone()]
    }
}
