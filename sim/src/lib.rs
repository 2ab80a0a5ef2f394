//! kvsim-sim: the deterministic executor, fault injection, exploration and the CLI.

pub mod check;
pub mod cli;
pub mod conformance;
pub mod cost;
pub mod dynamo;
pub mod exec;
pub mod exhaustive;
pub mod fuzz;
pub mod output;
pub mod sweep;
