//! A broken invariant, as every check reports it.

use std::fmt;

use super::InvariantId;

/// A broken invariant: its ID and the part of the state that breaks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub id: InvariantId,
    pub detail: String,
}

impl Violation {
    pub fn new(id: InvariantId, detail: String) -> Self {
        Violation { id, detail }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.id, self.detail)
    }
}
