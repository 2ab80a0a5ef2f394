//! kvsim-sim: the deterministic executor, fault injection, `kvsim check`, exhaustive mode, the
//! fuzzer and the cost model. Depends on `kvsim-core` alone: no clap, no cudarc.

pub mod check;
pub mod conformance;
pub mod cost;
pub mod dynamo;
pub mod exec;
pub mod exhaustive;
pub mod fuzz;
pub mod output;
pub mod sweep;
