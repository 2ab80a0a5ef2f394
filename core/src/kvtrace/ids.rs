//! Request ids interned to dense indices: replay state is indexed by them
//! instead of looked up by string. Each id keeps its JSON literal for the
//! observation lines, escaped once, and its rank in name order (observations
//! list requests by name), so that ordering never compares strings.

use std::collections::HashMap;

use super::json::push_str;

#[derive(Clone, Debug, Default)]
pub struct Ids {
    index: HashMap<String, u32>,
    names: Vec<String>,
    literals: Vec<String>,
    /// Rank by name of each id; covers every id once `rank_all` has run.
    ranks: Vec<u32>,
}

impl Ids {
    /// The index of `name`, allocating the next one on first sight.
    pub fn intern(&mut self, name: &str) -> u32 {
        if let Some(&k) = self.index.get(name) {
            return k;
        }
        let k = u32::try_from(self.names.len()).expect("fewer than 2^32 request ids");
        let mut literal = String::with_capacity(name.len() + 2);
        push_str(&mut literal, name);
        self.index.insert(name.to_string(), k);
        self.names.push(name.to_string());
        self.literals.push(literal);
        k
    }

    pub fn get(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    /// Rank every id by name (after interning new ones; cheap when there are none).
    pub fn rank_all(&mut self) {
        if self.ranks.len() == self.names.len() {
            return;
        }
        let mut by_name: Vec<u32> = (0..self.names.len() as u32).collect();
        by_name.sort_unstable_by(|&a, &b| self.names[a as usize].cmp(&self.names[b as usize]));
        self.ranks.resize(self.names.len(), 0);
        for (rank, &k) in (0u32..).zip(&by_name) {
            self.ranks[k as usize] = rank;
        }
    }

    /// The id's position in name order (`rank_all` must have run since it was interned).
    pub fn rank(&self, k: u32) -> u32 {
        self.ranks[k as usize]
    }

    pub fn name(&self, k: u32) -> &str {
        &self.names[k as usize]
    }

    /// The id as a JSON string literal (quotes included).
    pub fn literal(&self, k: u32) -> &str {
        &self.literals[k as usize]
    }
}
