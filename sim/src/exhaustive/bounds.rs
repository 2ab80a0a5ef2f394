//! What the exhaustive mode explores (spec/exhaustive.md §1): the layout, the
//! pool, the requests' prompts and the depth bound, checked before use.

use kvsim_core::kv::{GroupKind, GroupSpec, KvConfig, ModelMutant};
use serde_json::Value;

use super::system::{Op, System};
use super::trace;

/// At most this many request slots ("a", "b", "c").
pub const MAX_REQUESTS: usize = 3;
/// At most this many usable blocks (the null block comes on top).
pub const MAX_USABLE_BLOCKS: u32 = 8;

/// The cache groups of the explored manager.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One full-attention group: the unitary coordinator.
    Full,
    /// Full attention plus a sliding window of `sliding_window` tokens, both at
    /// `block_size`: the hybrid coordinator, window frees, null placeholders.
    FullAndSlidingWindow {
        /// The window in tokens.
        sliding_window: u64,
    },
    /// Full attention plus two sliding windows of different sizes: a later group's shorter
    /// hit makes the hybrid coordinator re-ask an earlier one (its fixed point).
    FullAndTwoWindows {
        /// The two windows in tokens, in group order.
        windows: [u64; 2],
    },
}

impl Layout {
    /// The sliding windows, in group order.
    fn windows(self) -> Vec<u64> {
        match self {
            Layout::Full => Vec::new(),
            Layout::FullAndSlidingWindow { sliding_window } => vec![sliding_window],
            Layout::FullAndTwoWindows { windows } => windows.to_vec(),
        }
    }
}

/// What is explored: the manager, the requests and the depth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// The layout.
    pub layout: Layout,
    /// Blocks in the pool **including the null block 0** (kvtrace's `num_blocks`),
    /// so `num_blocks - 1` are usable; at most `MAX_USABLE_BLOCKS + 1`.
    pub num_blocks: u32,
    /// Tokens per block.
    pub block_size: u64,
    /// One fixed prompt per request slot, 1 to `MAX_REQUESTS` of them.
    pub prompts: Vec<Vec<u64>>,
    /// Output tokens a request may emit (decode steps) before its sequence stops growing.
    pub max_output_tokens: u64,
    /// The depth bound: ops (of the alphabet) per sequence.
    pub max_ops: usize,
}

impl Default for Bounds {
    /// Three requests sharing prefixes over 7 usable blocks of 2 tokens
    /// (spec/exhaustive.md §5 gives what this explores).
    fn default() -> Self {
        Bounds {
            layout: Layout::Full,
            num_blocks: 8,
            block_size: 2,
            prompts: vec![vec![1, 2, 3, 4, 5], vec![1, 2, 3, 4, 6], vec![1, 2, 7]],
            max_output_tokens: 1,
            max_ops: 9,
        }
    }
}

impl Bounds {
    /// Full attention plus windows of 3 and then 2 tokens at one token per block, two
    /// requests whose prompts share four tokens, 12 ops deep (spec/exhaustive.md §6): small
    /// enough to close in a fraction of a second, and it reaches the hybrid coordinator's
    /// fixed point (the smaller window's shorter hit re-asks the larger one) in 8 ops.
    pub fn hybrid() -> Self {
        Bounds {
            layout: Layout::FullAndTwoWindows { windows: [3, 2] },
            num_blocks: 9,
            block_size: 1,
            prompts: vec![vec![1, 2, 3, 4], vec![1, 2, 3, 4, 5]],
            max_output_tokens: 1,
            max_ops: 12,
        }
    }
}

/// Bounds the explorer refuses, every problem listed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid exhaustive bounds: {}", .0.join("; "))]
pub struct BoundsError(pub Vec<String>);

impl Bounds {
    /// Every problem with these bounds (empty = valid).
    pub fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.prompts.is_empty() || self.prompts.len() > MAX_REQUESTS {
            p.push(format!("1 to {MAX_REQUESTS} prompts, got {}", self.prompts.len()));
        }
        if !(2..=MAX_USABLE_BLOCKS + 1).contains(&self.num_blocks) {
            let max = MAX_USABLE_BLOCKS + 1;
            p.push(format!(
                "num_blocks (null block included) in 2..={max}, got {}",
                self.num_blocks
            ));
        }
        if !(1..=8).contains(&self.block_size) {
            p.push(format!("block_size in 1..=8, got {}", self.block_size));
        }
        for (r, prompt) in self.prompts.iter().enumerate() {
            if !(1..=16).contains(&prompt.len()) {
                p.push(format!("prompt {r}: 1 to 16 tokens, got {}", prompt.len()));
            }
        }
        if self.max_output_tokens > 8 {
            p.push(format!("max_output_tokens at most 8, got {}", self.max_output_tokens));
        }
        for w in self.layout.windows() {
            if !(2..=64).contains(&w) {
                p.push(format!("sliding_window in 2..=64, got {w}"));
            }
        }
        if let Layout::FullAndTwoWindows { windows: [a, b] } = self.layout {
            if a == b {
                p.push(format!("the two sliding windows must differ, got {a} twice"));
            }
        }
        p
    }

    /// The manager's config: prefix caching on, `max_model_len` one above the longest
    /// sequence (so it never clamps an allocation).
    pub fn config(&self) -> KvConfig {
        let full = GroupSpec {
            kind: GroupKind::FullAttention,
            block_size: self.block_size,
        };
        let mut groups = vec![full];
        groups.extend(self.layout.windows().into_iter().map(|sliding_window| GroupSpec {
            kind: GroupKind::SlidingWindow { sliding_window },
            block_size: self.block_size,
        }));
        let longest = self.prompts.iter().map(Vec::len).max().unwrap_or(0) as u64;
        let max_model_len = longest + self.max_output_tokens + 1;
        KvConfig {
            num_blocks: self.num_blocks,
            enable_caching: true,
            max_model_len,
            max_in_flight_tokens: max_model_len,
            groups,
            watermark_blocks: 0,
        }
    }

    pub(super) fn system(&self, mutant: Option<ModelMutant>) -> System {
        System {
            config: self.config(),
            prompts: self.prompts.clone(),
            max_output_tokens: self.max_output_tokens,
            mutant,
        }
    }

    /// A complete kvtrace/1 file replaying `ops` (alphabet ops) from the initial state.
    pub fn kvtrace(&self, ops: &[Op], meta: Value) -> Value {
        trace::to_kvtrace(&self.system(None), ops, meta)
    }
}
