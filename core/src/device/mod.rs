//! The pure device lowering: a plan becomes a [`GpuProgram`] (a [`DeviceLayout`] plus steps of
//! [`GpuOp`]s) with everything a verifier needs to check each read. No device, no clock: the
//! GPU executor (`kvsim-gpu`) runs these programs, the cost model (`kvsim-sim`) prices them.
//!
//! K/V content is a pure function of (token, position, layer, head, dim) ([`content`]), so a
//! decode kernel can check, per position read, the tag embedded in the row against the token the
//! program says is there.

pub mod content;
pub mod ids;
pub mod layout;
pub mod lower;
pub mod lower_plan;
pub mod program;
pub mod ranks;

pub use ids::{BlockId, GroupId, PointId, ReqId};
pub use layout::{DeviceLayout, GroupKind, GroupLayout, MoeLayout};
pub use lower_plan::{
    lower_plan, lower_plan_timed, prompt_len, HostClock, LowerError, LowerOptions, LoweredPlan, MoeInput, NoClock,
    OpRef, PromptChunk, SyntheticKv,
};
pub use program::{
    BlockCopy, DecodeOp, DecodeSeq, GpuOp, GpuProgram, GpuStep, GroupTable, MoeOp, PrefillOp, StateUpdateOp,
};
