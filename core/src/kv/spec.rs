//! Cache-group specs and the derived block sizes (vllm_kv.md §3, §4.6; kvtrace-format.md §2.1).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Mamba cache modes in vLLM 0.33 (`"all"` does not exist there).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MambaMode {
    /// Mamba without prefix caching: one block per request.
    None,
    /// Mamba with prefix caching: block-aligned state checkpoints.
    Align,
}

/// The kind of one KV-cache group, with its kind-specific size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GroupKind {
    /// Full attention.
    FullAttention,
    /// Same manager as full attention, but a distinct spec: never merged with it.
    Mla,
    /// Sliding-window attention.
    SlidingWindow {
        /// The window in tokens.
        sliding_window: u64,
    },
    /// Chunked-local attention.
    ChunkedLocal {
        /// The chunk in tokens.
        attention_chunk_size: u64,
    },
    /// Recurrent state (Mamba / KDA).
    Mamba {
        /// `none` or `align`.
        mamba_cache_mode: MambaMode,
    },
}

impl GroupKind {
    /// Recurrent state as the device holds it (one state block per request; the cache mode
    /// is the host's business).
    pub const MAMBA_STATE: GroupKind = GroupKind::Mamba {
        mamba_cache_mode: MambaMode::Align,
    };

    /// Kinds whose spec is a `FullAttentionSpec` (sorted first by the hybrid coordinator).
    #[inline]
    pub fn is_full_attention_spec(self) -> bool {
        matches!(self, GroupKind::FullAttention | GroupKind::Mla)
    }

    /// Tokens no longer needed once `n` tokens are computed (`get_num_skipped_tokens`).
    /// Signed: Mamba returns `n - 1`, which is -1 for `n == 0`, and Python floors it.
    #[inline]
    pub fn skipped_tokens(self, n: i64) -> i64 {
        match self {
            GroupKind::FullAttention | GroupKind::Mla => 0,
            GroupKind::SlidingWindow { sliding_window } => (n - sliding_window as i64 + 1).max(0),
            GroupKind::ChunkedLocal { attention_chunk_size } => {
                let c = attention_chunk_size as i64;
                n.div_euclid(c) * c
            }
            GroupKind::Mamba { .. } => n - 1,
        }
    }

    /// The first position a read sees with `ctx` positions in cache, the reader's own
    /// included: full attention and MLA see them all, a sliding window the last `window`,
    /// chunked local the current chunk; recurrent state is read whole. The engine's content
    /// checks and the device lowering both ask this one function.
    pub fn attend_start(self, ctx: u64) -> u64 {
        match self {
            GroupKind::FullAttention | GroupKind::Mla | GroupKind::Mamba { .. } => 0,
            GroupKind::SlidingWindow { sliding_window } => ctx.saturating_sub(sliding_window),
            GroupKind::ChunkedLocal { attention_chunk_size } => {
                ctx.saturating_sub(1) / attention_chunk_size * attention_chunk_size
            }
        }
    }

    /// The positions a decode with `ctx_tokens` positions in cache attends to.
    pub fn attend_range(self, ctx_tokens: u32) -> std::ops::Range<u32> {
        self.attend_start(u64::from(ctx_tokens)) as u32..ctx_tokens
    }

    /// True for the kinds an attention read reads (everything but recurrent state).
    pub fn is_attention(self) -> bool {
        !matches!(self, GroupKind::Mamba { .. })
    }

    /// Short name with the kind's size, for device tables and messages.
    pub fn device_name(self) -> String {
        match self {
            GroupKind::FullAttention => "full".to_string(),
            GroupKind::Mla => "mla".to_string(),
            GroupKind::SlidingWindow { sliding_window } => format!("sliding_window({sliding_window})"),
            GroupKind::ChunkedLocal { attention_chunk_size } => format!("chunked_local({attention_chunk_size})"),
            GroupKind::Mamba { .. } => "mamba_state".to_string(),
        }
    }

    /// vLLM's name of the kind.
    pub fn name(self) -> &'static str {
        match self {
            GroupKind::FullAttention => "full_attention",
            GroupKind::Mla => "mla",
            GroupKind::SlidingWindow { .. } => "sliding_window",
            GroupKind::ChunkedLocal { .. } => "chunked_local",
            GroupKind::Mamba { .. } => "mamba",
        }
    }
}

/// One KV-cache group as the manager sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupSpec {
    /// The kind.
    pub kind: GroupKind,
    /// Tokens per block.
    pub block_size: u64,
}

/// Which coordinator vLLM picks (§4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoordinatorKind {
    /// Caching off.
    NoPrefixCache,
    /// One group.
    Unitary,
    /// Several groups (the fixed-point hit).
    Hybrid,
}

impl CoordinatorKind {
    /// Its name in observation lines.
    pub fn name(self) -> &'static str {
        match self {
            CoordinatorKind::NoPrefixCache => "no_prefix_cache",
            CoordinatorKind::Unitary => "unitary",
            CoordinatorKind::Hybrid => "hybrid",
        }
    }
}

/// Everything the KV-cache manager is built from.
#[derive(Debug, PartialEq, Eq)]
pub struct KvConfig {
    /// Blocks in the shared pool, including the null block 0.
    pub num_blocks: u32,
    /// Prefix caching on.
    pub enable_caching: bool,
    /// The model length.
    pub max_model_len: u64,
    /// Feeds the sliding-window and chunked-local admission caps.
    pub max_in_flight_tokens: u64,
    /// Cache groups, in group-id order.
    pub groups: Vec<GroupSpec>,
    /// `int(watermark * num_blocks)` (§5.2); 0 in kvtrace/1.
    pub watermark_blocks: u64,
}

reuse_clone!(KvConfig {
    num_blocks,
    enable_caching,
    max_model_len,
    max_in_flight_tokens,
    groups,
    watermark_blocks
});

/// A configuration vLLM (or kvtrace/1) refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// The largest token count or block size kvsim accepts (2^40).
pub const MAX_SIZE: u64 = 1 << 40;

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl KvConfig {
    /// `scheduler_block_size`: the group's block size, or the lcm of all (§4.6).
    pub fn scheduler_block_size(&self) -> u64 {
        self.groups
            .iter()
            .map(|g| g.block_size)
            .fold(1, |acc, b| acc / gcd(acc, b) * b)
    }

    /// `hash_block_size`: one group → its size; caching off → scheduler size; else gcd.
    pub fn hash_block_size(&self) -> u64 {
        if self.groups.len() == 1 {
            return self.groups[0].block_size;
        }
        if !self.enable_caching {
            return self.scheduler_block_size();
        }
        self.groups.iter().map(|g| g.block_size).fold(0, gcd)
    }

    /// The coordinator vLLM picks.
    pub fn coordinator(&self) -> CoordinatorKind {
        if !self.enable_caching {
            CoordinatorKind::NoPrefixCache
        } else if self.groups.len() == 1 {
            CoordinatorKind::Unitary
        } else {
            CoordinatorKind::Hybrid
        }
    }

    /// Per-request admission cap in blocks for recycling kinds (§3.4, §3.5).
    pub fn admission_cap(&self, g: GroupSpec) -> Option<u64> {
        let (mif, mml, bs) = (self.max_in_flight_tokens, self.max_model_len, g.block_size);
        match g.kind {
            GroupKind::SlidingWindow { sliding_window } => Some((sliding_window - 1 + mif).min(mml).div_ceil(bs) + 1),
            GroupKind::ChunkedLocal { attention_chunk_size } => {
                Some((attention_chunk_size + mif).min(mml).div_ceil(bs))
            }
            _ => None,
        }
    }

    /// The checks vLLM's constructors (and kvtrace/1) apply (kvtrace-format.md §2.1).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError(m));
        // DECISION (spec/kvtrace.md): sizes beyond 2^40 tokens are refused as a
        // ConfigError; vLLM would fail allocating such a cache, kvsim would overflow.
        let sizes = [self.max_model_len, self.max_in_flight_tokens]
            .into_iter()
            .chain(self.groups.iter().flat_map(|g| match g.kind {
                GroupKind::SlidingWindow { sliding_window: w } => [g.block_size, w],
                GroupKind::ChunkedLocal {
                    attention_chunk_size: c,
                } => [g.block_size, c],
                _ => [g.block_size, 1],
            }));
        for v in sizes {
            if v > MAX_SIZE {
                return err(format!("size {v} exceeds the supported maximum {MAX_SIZE}"));
            }
        }
        if self.num_blocks < 2 {
            return err(format!("num_blocks must be >= 2, got {}", self.num_blocks));
        }
        if self.max_model_len < 2 {
            return err(format!("max_model_len must be >= 2, got {}", self.max_model_len));
        }
        if self.max_in_flight_tokens < 1 {
            return err("max_in_flight_tokens must be >= 1".into());
        }
        if self.groups.is_empty() {
            return err("groups must be a non-empty list".into());
        }
        for (i, g) in self.groups.iter().enumerate() {
            if g.block_size < 1 {
                return err(format!("groups[{i}].block_size must be >= 1"));
            }
            match g.kind {
                GroupKind::SlidingWindow { sliding_window } if sliding_window < 2 => {
                    return err(format!("groups[{i}].sliding_window must be >= 2"));
                }
                GroupKind::ChunkedLocal { attention_chunk_size }
                    if attention_chunk_size < 1 || attention_chunk_size % g.block_size != 0 =>
                {
                    return err(format!(
                        "groups[{i}].attention_chunk_size {attention_chunk_size} is not a positive multiple of block_size {}",
                        g.block_size
                    ));
                }
                GroupKind::Mamba { mamba_cache_mode } => {
                    let align = mamba_cache_mode == MambaMode::Align;
                    if align != self.enable_caching {
                        return err(format!(
                            "groups[{i}]: mamba_cache_mode must be \"align\" iff enable_caching"
                        ));
                    }
                }
                _ => {}
            }
        }
        if self.enable_caching {
            let hbs = self.hash_block_size();
            let sbs = self.scheduler_block_size();
            for (i, g) in self.groups.iter().enumerate() {
                if matches!(g.kind, GroupKind::Mamba { .. }) && g.block_size != hbs {
                    return err(format!(
                        "groups[{i}]: mamba block_size {} != hash_block_size {hbs} (partial hash hits are out of scope)",
                        g.block_size
                    ));
                }
                if self.groups.len() > 1 && matches!(g.kind, GroupKind::ChunkedLocal { .. }) && g.block_size != sbs {
                    return err(format!(
                        "groups[{i}]: chunked_local block_size {} != scheduler_block_size {sbs} in a hybrid layout",
                        g.block_size
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(groups: &[(GroupKind, u64)], caching: bool) -> KvConfig {
        KvConfig {
            num_blocks: 10,
            enable_caching: caching,
            max_model_len: 256,
            max_in_flight_tokens: 256,
            groups: groups
                .iter()
                .map(|&(kind, block_size)| GroupSpec { kind, block_size })
                .collect(),
            watermark_blocks: 0,
        }
    }

    #[test]
    fn derived_block_sizes_follow_lcm_and_gcd() {
        let swa = GroupKind::SlidingWindow { sliding_window: 32 };
        let c = cfg(&[(GroupKind::FullAttention, 32), (swa, 16)], true);
        assert_eq!((c.scheduler_block_size(), c.hash_block_size()), (32, 16));
        let off = cfg(&[(GroupKind::FullAttention, 32), (swa, 16)], false);
        assert_eq!(off.hash_block_size(), 32);
        assert_eq!(c.coordinator(), CoordinatorKind::Hybrid);
        assert_eq!(off.coordinator(), CoordinatorKind::NoPrefixCache);
    }

    #[test]
    fn skipped_tokens_match_the_worked_examples() {
        // vllm_kv.md §3.4 worked example: window 4.
        let swa = GroupKind::SlidingWindow { sliding_window: 4 };
        assert_eq!([4, 5, 7, 11].map(|n| swa.skipped_tokens(n)), [1, 2, 4, 8]);
        let ch = GroupKind::ChunkedLocal {
            attention_chunk_size: 8,
        };
        assert_eq!(ch.skipped_tokens(17), 16);
        let m = GroupKind::Mamba {
            mamba_cache_mode: MambaMode::Align,
        };
        assert_eq!(m.skipped_tokens(0), -1);
    }

    #[test]
    fn mamba_mode_must_match_caching() {
        let m = GroupKind::Mamba {
            mamba_cache_mode: MambaMode::None,
        };
        assert!(cfg(&[(m, 256)], true).validate().is_err());
        assert!(cfg(&[(m, 256)], false).validate().is_ok());
    }

    #[test]
    fn windows_and_chunks_beyond_the_supported_size_are_refused() {
        let too_big = MAX_SIZE + 16;
        let swa = |w| GroupKind::SlidingWindow { sliding_window: w };
        let chunk = |c| GroupKind::ChunkedLocal {
            attention_chunk_size: c,
        };
        for kind in [swa(too_big), chunk(too_big)] {
            let e = cfg(&[(GroupKind::FullAttention, 16), (kind, 16)], true)
                .validate()
                .unwrap_err();
            assert_eq!(
                e.0,
                format!("size {too_big} exceeds the supported maximum {MAX_SIZE}"),
                "{kind:?}"
            );
        }
        for kind in [swa(MAX_SIZE), chunk(MAX_SIZE)] {
            assert_eq!(
                cfg(&[(GroupKind::FullAttention, 16), (kind, 16)], true).validate(),
                Ok(()),
                "{kind:?}"
            );
        }
    }
}
