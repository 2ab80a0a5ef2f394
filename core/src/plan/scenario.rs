//! The scenario part of a plan: the model layout, the pool and the scheduler.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::kv::{GroupKind, GroupSpec, KvConfig, MambaMode};

/// The kind of a cache group, as a plan names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupKindName {
    /// Full attention.
    FullAttention,
    /// Multi-head latent attention.
    Mla,
    /// Sliding-window attention.
    SlidingWindow,
    /// Chunked-local attention.
    ChunkedLocal,
    /// Recurrent state (Mamba / KDA); "align" mode iff prefix caching is on.
    Mamba,
}

/// One KV-cache group with its physical shape (the GPU sizes its pool from it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupLayout {
    /// The kind.
    pub kind: GroupKindName,
    /// Tokens per block.
    pub block_size: u64,
    /// Window in tokens (sliding_window only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<u64>,
    /// Chunk in tokens (chunked_local only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_chunk_size: Option<u64>,
    /// Layers whose KV lives in this group.
    pub layers: u32,
    /// KV heads per layer (1 for MLA's latent).
    pub kv_heads: u32,
    /// Head dimension (MLA: latent dimension; Mamba: state width per head).
    pub head_dim: u32,
}

/// The model: cache groups plus what makes compute content-dependent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelLayout {
    /// Cache groups, in group-id order.
    pub groups: Vec<GroupLayout>,
    /// Routed experts per MoE layer (0 = dense).
    #[serde(default)]
    pub experts: u32,
    /// Experts chosen per token.
    #[serde(default)]
    pub top_k: u32,
    /// Vocabulary size; synthetic tokens stay below it.
    pub vocab_size: u64,
}

/// vLLM scheduler settings the plan was made under.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SchedulerConfig {
    /// vLLM's `max_num_seqs`.
    pub max_num_seqs: u32,
    /// vLLM's `max_num_batched_tokens`.
    pub max_num_batched_tokens: u64,
    /// vLLM's `max_model_len`.
    pub max_model_len: u64,
    /// Prefix caching.
    pub enable_caching: bool,
    /// Asynchronous scheduling: outputs land one step after their forward pass.
    #[serde(default)]
    pub async_scheduling: bool,
    /// Fraction of blocks held back from admissions (vLLM `watermark`).
    #[serde(default)]
    pub watermark: f64,
}

/// The scenario part of a plan: model layout, pool, scheduler, ranks and seed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Its name.
    pub name: String,
    /// The model.
    pub model: ModelLayout,
    /// Blocks in each rank's pool, including the null block.
    pub pool_blocks: u32,
    /// The scheduler.
    pub scheduler: SchedulerConfig,
    /// Attention data-parallel ranks stepping in lock-step.
    #[serde(default = "one")]
    pub dp_ranks: u32,
    /// Seed of synthetic content.
    pub seed: u64,
}

fn one() -> u32 {
    1
}

impl GroupLayout {
    /// The model's group kind; `None` if the kind's size field is missing.
    pub fn group_kind(&self, caching: bool) -> Option<GroupKind> {
        Some(match self.kind {
            GroupKindName::FullAttention => GroupKind::FullAttention,
            GroupKindName::Mla => GroupKind::Mla,
            GroupKindName::SlidingWindow => GroupKind::SlidingWindow {
                sliding_window: self.sliding_window?,
            },
            GroupKindName::ChunkedLocal => GroupKind::ChunkedLocal {
                attention_chunk_size: self.attention_chunk_size?,
            },
            GroupKindName::Mamba => GroupKind::Mamba {
                mamba_cache_mode: if caching { MambaMode::Align } else { MambaMode::None },
            },
        })
    }
}

impl Scenario {
    /// The KV-cache manager configuration of one rank (groups must be validated).
    pub fn kv_config(&self) -> KvConfig {
        let caching = self.scheduler.enable_caching;
        let groups = self
            .model
            .groups
            .iter()
            .map(|g| GroupSpec {
                kind: g.group_kind(caching).unwrap_or(GroupKind::FullAttention),
                block_size: g.block_size,
            })
            .collect();
        KvConfig {
            num_blocks: self.pool_blocks,
            enable_caching: self.scheduler.enable_caching,
            max_model_len: self.scheduler.max_model_len,
            // vLLM's `max_concurrent_batches * max_num_batched_tokens`: async
            // scheduling overlaps two batches (vllm_kv.md, admission cap).
            max_in_flight_tokens: if self.scheduler.async_scheduling { 2 } else { 1 }
                * self.scheduler.max_num_batched_tokens,
            groups,
            watermark_blocks: (self.scheduler.watermark * f64::from(self.pool_blocks)) as u64,
        }
    }

    /// Whether a group holds recurrent state rather than attention KV.
    pub fn is_state_group(&self, g: usize) -> bool {
        self.model.groups[g].kind == GroupKindName::Mamba
    }
}
