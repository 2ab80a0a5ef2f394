//! kvsim-core: the pure model. No I/O, no clocks, no threads.

// Every public item is documented: this is a library others build on (issue 22).
#![warn(missing_docs)]

pub mod bugs;
pub mod device;
pub mod driver;
pub mod engine;
pub mod fpm;
pub mod invariants;
pub mod kv;
pub mod kvtrace;
pub mod plan;
pub mod serde_skip;
pub mod slips;
