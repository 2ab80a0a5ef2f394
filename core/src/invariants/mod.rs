//! Executable invariants. Every ID here appears exactly once in
//! `spec/invariants.md` and is checked in exactly one function.

pub mod catalog;
pub mod model;
pub mod ranks;
pub mod record;

use std::fmt;

/// A broken invariant: its catalog ID and the part of the state that breaks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub id: &'static str,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.id, self.detail)
    }
}
