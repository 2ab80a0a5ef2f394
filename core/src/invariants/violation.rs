//! A broken invariant, as every check reports it.

use std::fmt;

use super::InvariantId;

/// A broken invariant: its ID and the part of the state that breaks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub id: InvariantId,
    /// What broke, with the numbers.
    pub detail: String,
}

impl Violation {
    /// A violation of `id`.
    pub fn new(id: InvariantId, detail: String) -> Self {
        Violation { id, detail }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.id, self.detail)
    }
}
