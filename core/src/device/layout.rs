//! The device layout: one pool per cache group, sized from the scenario's model layout.
//!
//! Pool memory is block-major, so that zeroing or copying a block (copy-on-write) touches one
//! contiguous range. Inside one block of an attention group (vLLM v0's paged layout, K row-major
//! and V transposed, see vLLM `csrc/attention/attention_kernels.cu`):
//!
//! ```text
//! block: [layer][plane K: kv_head][slot][dim]   bf16
//!               [plane V: kv_head][dim][slot]   bf16 (transposed: a head's V column is contiguous)
//! MLA block:    [layer][slot][latent_dim + 8]   bf16 (K = V = the latent, rows padded)
//! state block:  [layer][state_head][state_dim]  f32  (elements 0 and 1 of each row: digest)
//! ```
//!
//! Block 0 of every group is the null block; `blocks_total` counts it.
//!
//! MLA rows carry [`MLA_ROW_PAD`] unused elements so that a block's rows, copied into shared
//! memory in one bulk copy, land on distinct banks for `ldmatrix` (a 1152-byte row stride puts
//! every row on the same banks). Bandwidth figures count only the latent bytes.

use crate::device::ids::GroupId;

/// The kind of one cache group: the model's own (one definition, with its read range).
pub use crate::kv::GroupKind;

/// One cache group's shape and pool size.
///
/// Field meanings per kind: for attention kinds `kv_heads`, `q_heads` and `head_dim` are the
/// usual ones; for [`GroupKind::Mla`] `kv_heads` must be 1, `head_dim` is the latent width and
/// `q_heads` the attention heads; for [`GroupKind::Mamba { .. }`] `kv_heads` is the number of state
/// heads, `head_dim` the f32 state elements per head, `q_heads` is unused and
/// `block_size_tokens` is not used on the device.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GroupLayout {
    /// The cache group's kind.
    pub kind: GroupKind,
    /// Tokens per block.
    pub block_size_tokens: u32,
    /// Layers whose KV lives in this group.
    pub layers: u32,
    /// KV heads per layer (MLA: 1; Mamba: state heads).
    pub kv_heads: u32,
    /// Query heads per layer.
    pub q_heads: u32,
    /// Head dimension (MLA: latent width; Mamba: f32 state elements per head).
    pub head_dim: u32,
    /// Blocks in the pool, the null block 0 included.
    pub blocks_total: u32,
}

/// Shape of the mixture-of-experts layer a `Moe` op runs (weights live on the device).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MoeLayout {
    /// Hidden size.
    pub hidden: u32,
    /// Expert FFN size.
    pub ffn: u32,
    /// Routed experts.
    pub experts: u32,
}

/// Every pool the device holds for one program.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct DeviceLayout {
    /// One pool layout per cache group, in group order.
    pub groups: Vec<GroupLayout>,
    /// The MoE layer, if the model has one.
    pub moe: Option<MoeLayout>,
}

/// Largest head dim the decode kernels take (the tensor-core kernel's accumulators live in
/// registers). Block sizes that are a multiple of 8 with head dims that are a multiple of 32 run
/// on the tensor-core kernel; other shapes (head dims a multiple of 4) on the generic one.
pub const MMA_MAX_HEAD_DIM: u32 = 256;
/// Unused bf16 elements after each MLA latent row (16 bytes).
pub const MLA_ROW_PAD: u32 = 8;
/// Largest MLA latent width the latent decode kernel takes.
pub const MLA_MAX_LATENT_DIM: u32 = 1024;
/// Largest `top_k` a `Moe` op takes.
pub const MOE_MAX_TOP_K: u32 = 8;

impl GroupLayout {
    /// K and V planes per layer: 2 for attention, 1 for MLA (K = V), 0 for state.
    pub fn planes(&self) -> u32 {
        match self.kind {
            GroupKind::Mla => 1,
            GroupKind::Mamba { .. } => 0,
            _ => 2,
        }
    }

    /// Bytes of one element: bf16 for K/V and latents, f32 for recurrent state.
    pub fn elem_bytes(&self) -> u64 {
        match self.kind {
            GroupKind::Mamba { .. } => 4,
            _ => 2,
        }
    }

    /// Elements of one block (all layers, all planes).
    pub fn block_elems(&self) -> u64 {
        let layers = u64::from(self.layers);
        let heads = u64::from(self.kv_heads);
        match self.kind {
            GroupKind::Mamba { .. } => layers * heads * u64::from(self.head_dim),
            _ => {
                layers
                    * u64::from(self.planes())
                    * heads
                    * u64::from(self.block_size_tokens)
                    * u64::from(self.row_elems())
            }
        }
    }

    /// Elements from one position's row to the next inside a head's plane: the head dim, plus
    /// [`MLA_ROW_PAD`] for MLA latents.
    pub fn row_elems(&self) -> u32 {
        match self.kind {
            GroupKind::Mla => self.head_dim + MLA_ROW_PAD,
            _ => self.head_dim,
        }
    }

    /// Bytes of one block.
    pub fn block_bytes(&self) -> u64 {
        self.block_elems() * self.elem_bytes()
    }

    /// Bytes of the whole pool, null block included.
    pub fn pool_bytes(&self) -> u64 {
        self.block_bytes() * u64::from(self.blocks_total)
    }

    /// Query heads per KV head (GQA group size).
    pub fn gqa_group(&self) -> u32 {
        self.q_heads.checked_div(self.kv_heads).unwrap_or(0)
    }

    /// Bytes a decode reads per attended position (all layers, K and V).
    pub fn kv_bytes_per_position(&self) -> u64 {
        let per_layer = u64::from(self.planes()) * u64::from(self.kv_heads) * u64::from(self.head_dim);
        per_layer * u64::from(self.layers) * self.elem_bytes()
    }

    /// Blocks needed to hold `tokens` positions (`div_ceil`).
    pub fn blocks_for(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.block_size_tokens.max(1))
    }

    /// Every problem with this group's shape, each message naming the group.
    pub fn problems(&self, group: GroupId) -> Vec<String> {
        let mut out = Vec::new();
        let mut bad = |msg: String| out.push(format!("{group} ({}): {msg}", self.kind.device_name()));
        if self.layers == 0 {
            bad("layers must be > 0".into());
        }
        if self.kv_heads == 0 {
            bad("kv_heads must be > 0".into());
        }
        if self.blocks_total < 2 {
            bad(format!(
                "blocks_total {} must be >= 2 (null block + one)",
                self.blocks_total
            ));
        }
        match self.kind {
            GroupKind::Mamba { .. } => {
                if self.head_dim < 4 || !self.head_dim.is_multiple_of(4) {
                    bad(format!("state_dim {} must be a multiple of 4, >= 4", self.head_dim));
                }
            }
            kind => {
                if self.block_size_tokens == 0 {
                    bad("block_size_tokens must be > 0".into());
                }
                if self.q_heads == 0 || !self.q_heads.is_multiple_of(self.kv_heads.max(1)) {
                    bad(format!(
                        "q_heads {} must be a positive multiple of kv_heads {}",
                        self.q_heads, self.kv_heads
                    ));
                }
                if kind == GroupKind::Mla {
                    if self.kv_heads != 1 {
                        bad(format!("MLA has one latent head, got kv_heads {}", self.kv_heads));
                    }
                    if self.head_dim < 8 || !self.head_dim.is_multiple_of(8) || self.head_dim > MLA_MAX_LATENT_DIM {
                        bad(format!(
                            "latent dim {} must be a multiple of 8 in 8..={MLA_MAX_LATENT_DIM}",
                            self.head_dim
                        ));
                    }
                } else if self.head_dim < 4 || !self.head_dim.is_multiple_of(4) || self.head_dim > MMA_MAX_HEAD_DIM {
                    bad(format!(
                        "head_dim {} must be a multiple of 4 in 4..={MMA_MAX_HEAD_DIM}",
                        self.head_dim
                    ));
                }
                match kind {
                    GroupKind::SlidingWindow { sliding_window: 0 } => bad("window_tokens must be > 0".into()),
                    GroupKind::ChunkedLocal {
                        attention_chunk_size: 0,
                    } => bad("chunk_tokens must be > 0".into()),
                    _ => {}
                }
            }
        }
        out
    }
}

impl MoeLayout {
    /// Bytes of the router and the expert weights (bf16).
    pub fn weight_bytes(&self) -> u64 {
        let (h, f, e) = (u64::from(self.hidden), u64::from(self.ffn), u64::from(self.experts));
        2 * (e * h + 2 * e * f * h)
    }

    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.hidden == 0 || !self.hidden.is_multiple_of(256) {
            out.push(format!(
                "moe: hidden {} must be a positive multiple of 256",
                self.hidden
            ));
        }
        if self.ffn == 0 || !self.ffn.is_multiple_of(256) {
            out.push(format!("moe: ffn {} must be a positive multiple of 256", self.ffn));
        }
        if self.experts == 0 || self.experts > 1024 {
            out.push(format!("moe: experts {} must be in 1..=1024", self.experts));
        }
        out
    }
}

impl DeviceLayout {
    /// The group with this id, if any.
    pub fn group(&self, id: GroupId) -> Option<&GroupLayout> {
        self.groups.get(id.0 as usize)
    }

    /// Bytes of every pool together (MoE weights not included).
    pub fn pool_bytes(&self) -> u64 {
        self.groups.iter().map(GroupLayout::pool_bytes).sum()
    }

    /// Every problem with the layout; empty when it is valid.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.groups.is_empty() {
            out.push("layout has no groups".to_string());
        }
        for (i, g) in self.groups.iter().enumerate() {
            out.extend(g.problems(GroupId(i as u32)));
        }
        if let Some(moe) = &self.moe {
            out.extend(moe.problems());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(bs: u32) -> GroupLayout {
        GroupLayout {
            kind: GroupKind::FullAttention,
            block_size_tokens: bs,
            layers: 2,
            kv_heads: 8,
            q_heads: 32,
            head_dim: 128,
            blocks_total: 10,
        }
    }

    #[test]
    fn block_bytes_per_kind() {
        // 2 layers x 2 planes x 8 heads x 16 slots x 128 dims x 2 bytes
        assert_eq!(full(16).block_bytes(), 2 * 2 * 8 * 16 * 128 * 2);
        assert_eq!(full(16).pool_bytes(), 10 * 2 * 2 * 8 * 16 * 128 * 2);
        let mla = GroupLayout {
            kind: GroupKind::Mla,
            kv_heads: 1,
            q_heads: 16,
            head_dim: 576,
            ..full(64)
        };
        // Rows padded to 584 elements; the attended bytes stay 576 per position and layer.
        assert_eq!(mla.block_bytes(), 2 * 64 * 584 * 2);
        assert_eq!(mla.kv_bytes_per_position(), 2 * 576 * 2);
        let mamba = GroupLayout {
            kind: GroupKind::MAMBA_STATE,
            kv_heads: 4,
            head_dim: 64,
            ..full(16)
        };
        assert_eq!(mamba.block_bytes(), 2 * 4 * 64 * 4);
        assert_eq!(full(16).kv_bytes_per_position(), 2 * 2 * 8 * 128 * 2);
        assert_eq!(mla.kv_bytes_per_position(), 2 * 576 * 2);
        // Every block is a whole number of 16-byte vectors (zero/copy kernels rely on it).
        for g in [full(16), mla, mamba] {
            assert_eq!(g.block_bytes() % 16, 0);
        }
    }

    #[test]
    fn attend_ranges() {
        assert_eq!(GroupKind::FullAttention.attend_range(100), 0..100);
        assert_eq!(
            GroupKind::SlidingWindow { sliding_window: 32 }.attend_range(100),
            68..100
        );
        assert_eq!(GroupKind::SlidingWindow { sliding_window: 32 }.attend_range(20), 0..20);
        let chunked = GroupKind::ChunkedLocal {
            attention_chunk_size: 64,
        };
        assert_eq!(chunked.attend_range(64), 0..64);
        assert_eq!(chunked.attend_range(65), 64..65);
        assert_eq!(chunked.attend_range(130), 128..130);
        assert_eq!(chunked.attend_range(0), 0..0);
    }

    #[test]
    fn validation_reports_every_problem() {
        let ok = DeviceLayout {
            groups: vec![full(16)],
            moe: None,
        };
        assert!(ok.problems().is_empty());
        let bad = DeviceLayout {
            groups: vec![GroupLayout {
                block_size_tokens: 0,
                head_dim: 102,
                blocks_total: 1,
                ..full(16)
            }],
            moe: Some(MoeLayout {
                hidden: 100,
                ffn: 256,
                experts: 8,
            }),
        };
        let problems = bad.problems();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].contains("g0"));
        let mla = GroupLayout {
            kind: GroupKind::Mla,
            kv_heads: 2,
            ..full(16)
        };
        assert!(mla.problems(GroupId(0)).iter().any(|p| p.contains("one latent head")));
    }

    #[test]
    fn blocks_for_rounds_up() {
        assert_eq!(full(16).blocks_for(0), 0);
        assert_eq!(full(16).blocks_for(16), 1);
        assert_eq!(full(16).blocks_for(17), 2);
    }
}
