//! kvsim-sim: the deterministic executor, fault injection, `kvsim check`, exhaustive mode, the
//! fuzzer and the cost model. Depends on `kvsim-core` alone: no clap, no cudarc.
//!
//! As a library, start at [`api`]: describe a scenario, plan it, run the plan, assert the
//! invariants held. With the `proptest` feature, `strategies` gives the swarm's case knobs
//! and scenarios as proptest strategies for your own property suites.

// Every public item is documented: this is a library others build on (issue 22).
#![warn(missing_docs)]

pub mod api;
pub mod check;
pub mod conformance;
pub mod cost;
pub mod dynamo;
pub mod exec;
pub mod exhaustive;
pub mod fuzz;
pub mod output;
#[cfg(feature = "proptest")]
pub mod strategies;
pub mod sweep;
