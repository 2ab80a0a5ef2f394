//! kvtrace/1: replay a KV-op trace through the model and print the observation
//! lines that `../shared/kvtrace/FORMAT.md` defines. Pure: text in, lines out.

mod config;
pub mod gen;
pub mod json;
mod ops;
mod replay;

pub use replay::{replay, replay_value, split_trace, Replay, ReplayEnd, Session, Step};

/// A file that is not a kvtrace at all (exit code 2 at the CLI).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("not valid JSON: {0}")]
    Json(String),
    #[error("not a kvtrace: {0}")]
    Shape(String),
}
