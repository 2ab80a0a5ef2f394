//! A model of vLLM 0.33.0's KV-cache management, exact in every kvtrace/1
//! observable (`spec/research/vllm_kv.md` §0 "core subset").

#[macro_use]
mod reuse_clone;

pub mod block_pool;
pub mod changes;
pub mod coordinator;
pub mod free_queue;
pub mod hash;
pub mod key_blocks;
pub mod key_map;
pub mod kv_cache_manager;
pub mod manager;
pub mod mutant;
pub mod req_map;
pub mod request;
pub(crate) mod shortcuts;
pub mod spec;
#[cfg(test)]
pub(crate) mod state_text;

/// Count `by` changes in a version counter (one that observers compare for change).
/// Wrapping: 2^64 changes cannot happen, and the checked add of an overflow-checked build
/// was a compare and branch on every block queued, drawn or cached.
#[inline(always)]
pub(crate) fn bump(version: &mut u64, by: u64) {
    *version = version.wrapping_add(by);
}

pub use block_pool::{BlockPool, PoolError, NULL_BLOCK};
pub use kv_cache_manager::{AllocateArgs, ComputedBlocks, KvCacheManager};
pub use mutant::{ManagerSlip, ModelMutant};
pub use request::{ReqId, Request, RequestStatus};
pub use spec::{ConfigError, CoordinatorKind, GroupKind, GroupSpec, KvConfig, MambaMode};
