//! The `kvsim` command line: one file per command under `cli/`, over `kvsim-sim` (the simulator,
//! checks, cost model) and `kvsim-gpu` (the cudarc executor).

pub mod cli;
pub mod schemas;
