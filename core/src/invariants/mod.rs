//! Executable invariants. Every ID here appears exactly once in
//! `spec/invariants.md` and is checked in exactly one function.

pub mod catalog;
pub mod model;
pub mod planner;
pub mod ranks;
pub mod record;
mod violation;
pub mod watch;

pub use catalog::InvariantId;
pub use violation::Violation;
