//! The shipped Dynamo planner as a plan source (spec/dynamo.md): the harness
//! (`conformance/dynamo/harness.py`) runs ai-dynamo 1.6.1's real
//! `InstrumentedScheduler` over vLLM 0.31.0 on CPU in a subprocess and records
//! it; this module drives it and hands back a validated `kvsim-plan/1` plan.

pub mod check;
pub mod diff;
pub mod env;
mod harness;
pub mod mutants;
mod worker;

pub use harness::{audit_error, parse_shrink, record, temp_dir, RecordError, RecordOptions, Recording, TempDir};
pub use worker::Worker;
