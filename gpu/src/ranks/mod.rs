//! Attention-DP ranks on their own executors, in lock-step (issue 23).
//!
//! `kvsim replay PLAN --backend gpu --devices N` cuts the lowered plan into one program per
//! rank (`kvsim_core::device::ranks::split_ranks`) and runs rank `r` on device `r mod N`, one
//! thread per rank, each with its own pools, stream and kernels. After every step each rank
//! waits for its stream, delays as the plan's `message_lag` says, and joins the step's
//! exchange, which all-gathers what the simulator says each rank sends (stage verdict, free
//! blocks, injected point) and checks it. The clocks of that hand-off give per rank and step
//! the busy time, the lag and the wait; their spread is the skew.
//!
//! - `exchange`: the [`Exchange`] trait and the host-side [`HostExchange`];
//! - `nccl`: the device-side exchange's place (a typed error in this build);
//! - `lockstep`: one rank's lag, exchange and records ([`RankClock`]), no device;
//! - `run`: threads and executors ([`run_ranks`]);
//! - `merge`: per-rank reports back to one report of the whole program.

mod exchange;
mod lockstep;
mod merge;
pub mod nccl;
mod run;
#[cfg(test)]
mod tests;

pub use exchange::{Exchange, ExchangeError, HostExchange};
pub use lockstep::{delay, ExchangeMismatch, RankClock, StepRecord};
pub use merge::merge_reports;
pub use run::{check_devices, run_ranks, ExchangeKind, RankRun, RanksOptions};
