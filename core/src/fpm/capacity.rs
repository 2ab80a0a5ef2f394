//! Per-request block need per cache group and plan footprints (dynamo_fpm.md §2.2).

use super::grid::{BlockNeed, BlockNeedQuery};
use crate::kv::{GroupKind, KvConfig, MambaMode};

/// `_bench_blocks_per_req` over a KV layout.
#[derive(Clone, Debug)]
pub struct LayoutNeed {
    /// The KV config the need is computed for.
    pub config: KvConfig,
    /// Native warm-up: each align-mode state group reserves one more block for the
    /// first decode's partial-tail allocation (seed 000).
    pub native_reserve: bool,
    /// §8.2 bug 23 (a mutant): align-mode state counted as one block per request.
    pub align_one_block: bool,
}

impl LayoutNeed {
    /// The need of `config`'s layout.
    pub fn new(config: KvConfig) -> Self {
        LayoutNeed {
            config,
            native_reserve: false,
            align_one_block: false,
        }
    }

    /// Blocks per group of one request.
    pub fn per_group(&self, q: BlockNeedQuery) -> Vec<u64> {
        self.config
            .groups
            .iter()
            .map(|g| {
                let base = q.num_tokens.div_ceil(g.block_size);
                match g.kind {
                    // Old and new state may coexist: 2 blocks (+ speculative + checkpoint = 0).
                    GroupKind::Mamba {
                        mamba_cache_mode: MambaMode::Align,
                    } if self.align_one_block => 1,
                    GroupKind::Mamba {
                        mamba_cache_mode: MambaMode::Align,
                    } => 2 + u64::from(self.native_reserve),
                    _ => match (q.apply_admission_cap, self.config.admission_cap(*g)) {
                        (true, Some(cap)) => base.min(cap),
                        _ => base,
                    },
                }
            })
            .collect()
    }
}

impl BlockNeed for LayoutNeed {
    fn blocks_per_req(&self, q: BlockNeedQuery) -> u64 {
        self.per_group(q).iter().sum()
    }
}

/// Blocks a native stage needs: every request prefilled to `injected_i` and
/// decoded `steps` more tokens, window groups at their admission cap.
pub fn native_footprint(need: &LayoutNeed, injected: &[u64], steps: u64) -> u64 {
    injected
        .iter()
        .map(|&len| {
            need.blocks_per_req(BlockNeedQuery {
                num_tokens: len + 1 + steps,
                has_cache_hit: false,
                apply_admission_cap: true,
            })
        })
        .sum()
}
