//! kvtrace/1: replay a KV-op trace through the model and print the observation
//! lines that `spec/kvtrace-format.md` defines. Pure: text in, lines out.

mod compile;
mod compiled;
mod config;
mod exec;
pub mod gen;
mod ids;
pub mod json;
mod live;
mod observe;
mod observed;
mod ops;
mod replay;
mod session;
mod text;

pub use compiled::{compile, CompiledTrace, ReplayStorage};
pub use replay::{replay, replay_value, split_trace, Replay, ReplayEnd};
pub use session::{Session, Step};
pub use text::compile_text;

/// A file that is not a kvtrace at all (exit code 2 at the CLI).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// Not JSON.
    #[error("not valid JSON: {0}")]
    Json(String),
    /// Not a kvtrace's shape.
    #[error("not a kvtrace: {0}")]
    Shape(String),
}
