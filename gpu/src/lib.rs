//! kvsim-gpu: runs kvsim plans on an NVIDIA GPU with real paged KV, verifies every read and
//! times every step.
//!
//! A plan is lowered into a [`GpuProgram`] (a [`DeviceLayout`] plus steps of [`GpuOp`]s) by
//! `kvsim_core::device` (pure, re-exported here); a [`GpuExecutor`] holds one pool per cache
//! group and runs it. K/V content is a pure function
//! of (token, position, layer, head, dim) ([`content`]), so each decode kernel checks, per
//! position read, the tag embedded in the row against the token the program says is there, and
//! sums the tags into a checksum; mismatches come back as [`Violation`]s naming step, request,
//! group and block.
//!
//! The crate builds and its tests pass without CUDA: the driver and NVRTC are loaded at run
//! time, and device tests print `skipped: no CUDA device (reason)`.

// Every public item is documented: this is a library others build on (issue 22).
#![warn(missing_docs)]

pub mod bandwidth;
pub mod device;
#[cfg(test)]
mod emulate;
#[cfg(test)]
mod emulate_latent;
pub mod error;
pub mod executor;
pub mod host_clock;
pub mod kernels;
pub mod ranks;
pub mod reference;
pub mod selfcheck;

pub use device::{no_device_reason, DeviceInfo};
pub use error::GpuError;
pub use executor::{
    ExecOptions, ExecReport, ExecutorOptions, GpuExecutor, OpTiming, PointTiming, StepSync, StepTiming, Violation,
    ViolationKind,
};
pub use host_clock::{lower_plan_measured, WallClock};
pub use kvsim_core::device::{
    content, ids, layout, lower, lower_plan, program, BlockCopy, BlockId, DecodeOp, DecodeSeq, DeviceLayout, GpuOp,
    GpuProgram, GpuStep, GroupId, GroupKind, GroupLayout, GroupTable, LowerError, LowerOptions, LoweredPlan, MoeInput,
    MoeLayout, MoeOp, OpRef, PointId, PrefillOp, ReqId, StateUpdateOp, SyntheticKv,
};
