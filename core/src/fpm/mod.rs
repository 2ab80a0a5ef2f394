//! FPM benchmark model: grid, gate, artifact types.
pub mod grid;
