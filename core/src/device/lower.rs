//! Host-side helpers that turn ops into launches and expectations: which kernel a group uses,
//! how a decode is split across CTAs, and what the verifier expects each read to return.
//! Pure functions, unit-tested without a GPU.

use crate::device::content::{packed_tag, StateDigest};
use crate::device::layout::{GroupKind, GroupLayout, MLA_ROW_PAD, MMA_MAX_HEAD_DIM};

/// Threads per CTA of the decode kernels (four warps; the tensor-core latent kernel has two
/// groups of four and two producer warps, see [`AttnKernel::threads`]).
pub const DECODE_THREADS: u32 = 128;

/// Positions a decode CTA's tile starts on: ranges are aligned down to this many positions.
pub const TILE_TOKENS: u32 = 32;
/// Split lengths are multiples of this (four warps of one tile each).
pub const SPLIT_QUANTUM_TOKENS: u32 = 128;
/// Heads x dims a tensor-core CTA combines in shared memory (`HT * D <= 2048`).
const MMA_SMEM_HEAD_DIMS: u32 = 2048;
/// Register budget of the latent kernel: `head_tile * chunks_per_lane <= 6`.
const LATENT_REG_CHUNKS: u32 = 6;
/// Widest latent the tensor-core latent kernel takes (its accumulators, `latent_dim / 32 * 4`
/// per lane, and Q fragments, `latent_dim / 64 * 4`, live in registers).
pub const LATENT_MMA_MAX_DIM: u32 = 768;
/// Most tile stages the tensor-core latent kernel keeps.
const LATENT_MMA_MAX_STAGES: u32 = 6;
/// Static shared memory the tensor-core latent kernel keeps beside its dynamic allocation
/// (mbarriers, the verifier's expected-tag slots), rounded up.
const LATENT_MMA_STATIC_SMEM: u32 = 1536;
/// Shared memory one CTA may use on sm_90 (227 KiB).
pub const SM90_MAX_DYNAMIC_SMEM: u32 = 232_448;
/// Shared memory of one sm_90 SM (228 KiB).
pub const SM90_SMEM_PER_SM: u32 = 233_472;

/// The decode kernel family a group uses, with its compile-time shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AttnKernel {
    /// Tensor-core (mma.sync m16n8k16 bf16) kernel: K row-major, V transposed.
    Mma {
        /// Head dimension.
        head_dim: u32,
        /// Query heads per CTA.
        head_tile: u32,
    },
    /// CUDA-core kernel over row-major MLA latents (K = V), for latent widths the tensor-core
    /// latent kernel does not take.
    Latent {
        /// Latent width.
        latent_dim: u32,
        /// Query heads per CTA.
        head_tile: u32,
    },
    /// Tensor-core kernel over row-major MLA latents (K = V): 32-position tiles staged in
    /// shared memory `stages` deep, up to 16 query heads per CTA as the MMA rows.
    LatentMma {
        /// Latent width.
        latent_dim: u32,
        /// Query heads per CTA (the MMA rows).
        head_tile: u32,
        /// Shared-memory pipeline depth.
        stages: u32,
    },
    /// CUDA-core kernel for K/V shapes the tensor-core kernel does not take (block size not a
    /// multiple of 8, head dim not a multiple of 32); one query head per CTA.
    Generic {
        /// Head dimension.
        head_dim: u32,
    },
}

impl AttnKernel {
    /// The kernel for an attention group (`None` for state groups).
    pub fn for_group(g: &GroupLayout) -> Option<AttnKernel> {
        let group = g.gqa_group().max(1);
        match g.kind {
            GroupKind::Mamba { .. } => None,
            GroupKind::Mla if latent_mma_takes(g.head_dim) => Some(AttnKernel::LatentMma {
                latent_dim: g.head_dim,
                head_tile: largest_divisor_at_most(group, 16),
                stages: latent_mma_stages(g.head_dim),
            }),
            GroupKind::Mla => {
                let chunks_per_lane = (g.head_dim / 8).div_ceil(32).max(1);
                let cap = (LATENT_REG_CHUNKS / chunks_per_lane).max(1);
                Some(AttnKernel::Latent {
                    latent_dim: g.head_dim,
                    head_tile: largest_divisor_at_most(group, cap),
                })
            }
            _ if !mma_takes(g) => Some(AttnKernel::Generic { head_dim: g.head_dim }),
            _ => {
                let cap = 16.min(MMA_SMEM_HEAD_DIMS / g.head_dim.max(1)).max(1);
                Some(AttnKernel::Mma {
                    head_dim: g.head_dim,
                    head_tile: largest_divisor_at_most(group, cap),
                })
            }
        }
    }

    /// Query heads one CTA handles.
    pub fn head_tile(self) -> u32 {
        match self {
            AttnKernel::Mma { head_tile, .. }
            | AttnKernel::Latent { head_tile, .. }
            | AttnKernel::LatentMma { head_tile, .. } => head_tile,
            AttnKernel::Generic { .. } => 1,
        }
    }

    /// The function name in the GPU executor's kernel source (`kvsim_gpu::kernels::SOURCE`).
    pub fn function_name(self) -> &'static str {
        match self {
            AttnKernel::Mma { .. } => "attn_mma",
            AttnKernel::Latent { .. } => "attn_latent",
            AttnKernel::LatentMma { .. } => "attn_latent_mma",
            AttnKernel::Generic { .. } => "attn_generic",
        }
    }

    /// `#define`s that specialise the source for this shape.
    pub fn defines(self) -> String {
        match self {
            AttnKernel::Mma { head_dim, head_tile } => format!("#define HD {head_dim}\n#define HT {head_tile}\n"),
            AttnKernel::Latent { latent_dim, head_tile } => {
                format!("#define LD {latent_dim}\n#define GT {head_tile}\n")
            }
            AttnKernel::LatentMma {
                latent_dim,
                head_tile,
                stages,
            } => format!("#define LDM {latent_dim}\n#define GTM {head_tile}\n#define LNST {stages}\n"),
            AttnKernel::Generic { head_dim } => format!("#define GHD {head_dim}\n"),
        }
    }

    /// The module the executor compiles for this kernel (one per distinct shape).
    pub fn module_name(self) -> String {
        match self {
            AttnKernel::Mma { head_dim, head_tile } => format!("attn_mma_d{head_dim}_h{head_tile}"),
            AttnKernel::Latent { latent_dim, head_tile } => format!("attn_latent_d{latent_dim}_h{head_tile}"),
            AttnKernel::LatentMma {
                latent_dim,
                head_tile,
                stages,
            } => format!("attn_latent_mma_d{latent_dim}_h{head_tile}_s{stages}"),
            AttnKernel::Generic { head_dim } => format!("attn_generic_d{head_dim}"),
        }
    }

    /// Threads per CTA: two groups of four warps and their two producer warps for the
    /// tensor-core latent kernel, four warps for the others.
    pub fn threads(self) -> u32 {
        match self {
            AttnKernel::LatentMma { .. } => 2 * DECODE_THREADS + 64,
            _ => DECODE_THREADS,
        }
    }

    /// CTAs per SM the kernel is built for, when its design fixes it: the tensor-core latent
    /// kernel takes a whole SM (`__launch_bounds__(320, 1)`, most of shared memory).
    pub fn max_ctas_per_sm(self) -> Option<u32> {
        match self {
            AttnKernel::LatentMma { .. } => Some(1),
            _ => None,
        }
    }

    /// Dynamic shared memory a CTA of this kernel needs (bytes).
    pub fn dynamic_smem(self) -> u32 {
        match self {
            AttnKernel::LatentMma { latent_dim, stages, .. } => latent_mma_smem(latent_dim, stages),
            _ => 0,
        }
    }
}

/// True when the tensor-core latent kernel takes an MLA latent width: four warps split it
/// into whole 16-dim MMA steps.
pub fn latent_mma_takes(latent_dim: u32) -> bool {
    latent_dim.is_multiple_of(64) && latent_dim <= LATENT_MMA_MAX_DIM
}

/// Shared memory of the tensor-core latent kernel: `stages` tiles of 32 rows (padded by
/// [`MLA_ROW_PAD`] elements, as in the pool, so ldmatrix rows fall in distinct banks), and per
/// group of warps four f32 partial-score tiles (16 x 40), P (16 x 40 bf16), row maxima and row
/// sums, plus 16 (M, L) pairs for the merge and the 2 x 4 warps' rescale flags, and 128 bytes
/// to start the stages on a 128-byte boundary. Mirrors the layout in the CUDA source.
pub fn latent_mma_smem(latent_dim: u32, stages: u32) -> u32 {
    stages * 32 * (latent_dim + MLA_ROW_PAD) * 2
        + 2 * (4 * 16 * 40 * 4 + 16 * 40 * 2 + 64 * 4 + 64 * 4)
        + 16 * 2 * 4
        + 2 * 4 * 4
        + 128
}

/// Pipeline depth of the tensor-core latent kernel: the deepest even count, at most
/// `LATENT_MMA_MAX_STAGES`, that fits one CTA (one CTA of two warp groups per SM). Even,
/// because stage s must always hold tiles of group s % 2: a group waiting on a stage the other
/// group still reads could wait two phases early and pass on the parity of an old phase (seen
/// on the H200 with three stages, when the groups refilled their own stages).
pub fn latent_mma_stages(latent_dim: u32) -> u32 {
    (1..=LATENT_MMA_MAX_STAGES / 2)
        .rev()
        .map(|h| 2 * h)
        .find(|&s| latent_mma_ctas_per_sm(latent_dim, s) >= 1)
        .unwrap_or(2)
}

/// CTAs of the tensor-core latent kernel that fit on one SM by shared memory (sm_90: 228 KiB
/// per SM, 227 KiB per CTA, 1 KiB reserved per CTA).
pub fn latent_mma_ctas_per_sm(latent_dim: u32, stages: u32) -> u32 {
    let per_cta = latent_mma_smem(latent_dim, stages) + LATENT_MMA_STATIC_SMEM;
    if per_cta > SM90_MAX_DYNAMIC_SMEM {
        0
    } else {
        SM90_SMEM_PER_SM / (per_cta + 1024)
    }
}

/// True when the tensor-core kernel takes this attention group's shape: 8-position chunks
/// stay inside one block and head dims are whole 32-dim MMA steps.
pub fn mma_takes(g: &GroupLayout) -> bool {
    g.block_size_tokens.is_multiple_of(8) && g.head_dim.is_multiple_of(32) && g.head_dim <= MMA_MAX_HEAD_DIM
}

/// Largest divisor of `n` that is at most `cap` (1 if none larger).
pub fn largest_divisor_at_most(n: u32, cap: u32) -> u32 {
    (1..=cap.min(n).max(1))
        .rev()
        .find(|&d| n.is_multiple_of(d))
        .unwrap_or(1)
}

/// How a decode's attended range is split across CTAs (flash-decoding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitPlan {
    /// Tokens each CTA attends.
    pub split_tokens: u32,
    /// CTAs the range is split across.
    pub nsplit: u32,
}

/// Start of the range a decode kernel walks: `lo` aligned down to [`TILE_TOKENS`].
pub fn aligned_lo(lo: u32) -> u32 {
    lo / TILE_TOKENS * TILE_TOKENS
}

/// Chooses the split length (a multiple of [`SPLIT_QUANTUM_TOKENS`]) for `ctas_per_split` CTAs
/// per split (requests x layers x kv heads x head tiles), the longest aligned span any request
/// walks and `resident_ctas` CTAs that fit on the device at once. Candidates split the span
/// evenly into 1, 2, ... parts; each is scored `wave efficiency x iteration efficiency`: full
/// last waves, and enough 32-position tiles per warp (`iters = split / 128`) that a CTA's start-up
/// is amortised (`iters / (iters + 1)`). Ties go to the longer split. On an H200, one split per
/// request that fills about a wave was as fast as two splits or up to 10% faster
/// (docs/gpu-bandwidth.md).
/// `forced_split_tokens` (rounded up to the quantum) overrides the choice.
pub fn choose_split(
    max_span: u32,
    ctas_per_split: u64,
    resident_ctas: u64,
    forced_split_tokens: Option<u32>,
) -> SplitPlan {
    let q = SPLIT_QUANTUM_TOKENS;
    let span = max_span.max(1);
    let plan = |split_tokens: u32| SplitPlan {
        split_tokens,
        nsplit: span.div_ceil(split_tokens).max(1),
    };
    if let Some(t) = forced_split_tokens {
        return plan(t.max(1).div_ceil(q) * q);
    }
    let resident = resident_ctas.max(1) as f64;
    let mut best = (f64::MIN, plan(span.div_ceil(q) * q));
    for n in 1..=span.div_ceil(q) {
        let p = plan(span.div_ceil(n).div_ceil(q) * q);
        let waves = (ctas_per_split.max(1) * u64::from(p.nsplit)) as f64 / resident;
        let iters = f64::from(p.split_tokens) / f64::from(q);
        let score = waves / waves.ceil() * iters / (iters + 1.0);
        if score > best.0 + 1e-9 {
            best = (score, p);
        }
    }
    best.1
}

/// What the verifier expects from one request's reads of one attention group in one decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeExpect {
    /// K rows checked: attended positions x layers x kv heads.
    pub reads: u64,
    /// Wrapping sum of the packed tags of every row read (K and V planes).
    pub checksum: u64,
}

/// The expectation for a request whose cache holds `tokens` (position `p` holds `tokens[p]`).
pub fn decode_expect(g: &GroupLayout, tokens: &[u32]) -> DecodeExpect {
    let range = g.kind.attend_range(tokens.len() as u32);
    let per_row = u64::from(g.layers) * u64::from(g.kv_heads);
    let tag_sum = range
        .clone()
        .fold(0u64, |acc, p| acc.wrapping_add(packed_tag(tokens[p as usize], p)));
    DecodeExpect {
        reads: u64::from(range.end - range.start) * per_row,
        checksum: tag_sum.wrapping_mul(per_row).wrapping_mul(u64::from(g.planes())),
    }
}

/// What the verifier expects from one state update: every (layer, head) row read once, each
/// carrying the digest of `history`.
pub fn state_expect(g: &GroupLayout, history: &[u32]) -> (StateDigest, DecodeExpect) {
    let digest = StateDigest::of(history);
    let rows = u64::from(g.layers) * u64::from(g.kv_heads);
    (
        digest,
        DecodeExpect {
            reads: rows,
            checksum: u64::from(digest.checksum).wrapping_mul(rows),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(kind: GroupKind, q_heads: u32, head_dim: u32) -> GroupLayout {
        GroupLayout {
            kind,
            block_size_tokens: 16,
            layers: 2,
            kv_heads: if kind == GroupKind::Mla { 1 } else { 2 },
            q_heads,
            head_dim,
            blocks_total: 8,
        }
    }

    #[test]
    fn kernel_choice_and_head_tiles() {
        assert_eq!(
            AttnKernel::for_group(&group(GroupKind::FullAttention, 8, 128)),
            Some(AttnKernel::Mma {
                head_dim: 128,
                head_tile: 4
            })
        );
        // 2 kv heads x 32 q heads each: 16 per CTA at D=128, 8 at D=256.
        assert_eq!(
            AttnKernel::for_group(&group(GroupKind::FullAttention, 64, 128)).map(AttnKernel::head_tile),
            Some(16)
        );
        assert_eq!(
            AttnKernel::for_group(&group(GroupKind::FullAttention, 64, 256)).map(AttnKernel::head_tile),
            Some(8)
        );
        // MLA widths that split into four warps of whole MMA steps take the tensor-core latent
        // kernel (16 heads per CTA, as many stages as fit); others the CUDA-core one.
        let mla576 = AttnKernel::for_group(&group(GroupKind::Mla, 16, 576));
        assert_eq!(
            mla576,
            Some(AttnKernel::LatentMma {
                latent_dim: 576,
                head_tile: 16,
                stages: 4
            })
        );
        let k = mla576.expect("latent kernel");
        assert_eq!(k.module_name(), "attn_latent_mma_d576_h16_s4");
        assert_eq!(k.threads(), 320); // two groups of four warps and their two producer warps
        assert_eq!(k.max_ctas_per_sm(), Some(1));
        assert_eq!(k.dynamic_smem(), latent_mma_smem(576, 4));
        // Every width the kernel takes fits an even stage count of at least two; 576 fits five
        // stages but not six, so it takes four; narrow widths take six.
        for ld in (64..=LATENT_MMA_MAX_DIM).step_by(64) {
            let st = latent_mma_stages(ld);
            assert!(
                latent_mma_ctas_per_sm(ld, st) >= 1 && st >= 2 && st.is_multiple_of(2),
                "{ld}"
            );
        }
        assert_eq!(latent_mma_ctas_per_sm(576, 5), 1);
        assert_eq!(latent_mma_ctas_per_sm(576, 6), 0);
        assert_eq!(latent_mma_stages(768), 4);
        assert_eq!(latent_mma_stages(64), 6);
        assert_eq!(
            AttnKernel::for_group(&group(GroupKind::Mla, 32, 128)).map(AttnKernel::head_tile),
            Some(16)
        );
        assert_eq!(
            AttnKernel::for_group(&group(GroupKind::Mla, 16, 40)),
            Some(AttnKernel::Latent {
                latent_dim: 40,
                head_tile: 4
            })
        );
        assert_eq!(
            AttnKernel::for_group(&group(GroupKind::Mla, 16, 1024)).map(AttnKernel::head_tile),
            Some(1)
        );
        assert_eq!(AttnKernel::for_group(&group(GroupKind::MAMBA_STATE, 2, 64)), None);
        // Shapes the tensor-core kernel does not take fall back to the generic kernel.
        assert_eq!(
            AttnKernel::for_group(&group(GroupKind::FullAttention, 8, 8)),
            Some(AttnKernel::Generic { head_dim: 8 })
        );
        let bs4 = GroupLayout {
            block_size_tokens: 4,
            ..group(GroupKind::SlidingWindow { sliding_window: 4 }, 8, 128)
        };
        assert_eq!(AttnKernel::for_group(&bs4), Some(AttnKernel::Generic { head_dim: 128 }));
        assert_eq!(AttnKernel::Generic { head_dim: 8 }.head_tile(), 1);
        assert_eq!(largest_divisor_at_most(12, 5), 4);
        assert_eq!(largest_divisor_at_most(7, 6), 1);
    }

    #[test]
    fn split_heuristic() {
        // 32 requests x 8 heads at 4096 tokens, 264 CTAs resident: one split fills a wave.
        assert_eq!(
            choose_split(4096, 256, 264, None),
            SplitPlan {
                split_tokens: 4096,
                nsplit: 1
            }
        );
        // Already four waves: one split.
        assert_eq!(
            choose_split(4096, 1024, 264, None),
            SplitPlan {
                split_tokens: 4096,
                nsplit: 1
            }
        );
        // 8 requests x 8 heads: four splits of 1024 fill the device.
        assert_eq!(
            choose_split(4096, 64, 264, None),
            SplitPlan {
                split_tokens: 1024,
                nsplit: 4
            }
        );
        // 140 CTAs per split: one split leaves half the device idle, more splits fill it.
        assert!(choose_split(4096, 140, 264, None).nsplit > 1);
        // Short contexts never split below the quantum.
        assert_eq!(
            choose_split(100, 1, 264, None),
            SplitPlan {
                split_tokens: 128,
                nsplit: 1
            }
        );
        assert_eq!(
            choose_split(4096, 256, 264, Some(500)),
            SplitPlan {
                split_tokens: 512,
                nsplit: 8
            }
        );
        assert_eq!(choose_split(0, 1, 1, None).nsplit, 1);
        assert_eq!(aligned_lo(68), 64);
    }

    #[test]
    fn decode_expectations_follow_the_window() {
        let tokens: Vec<u32> = (0..100).map(|i| i * 3 + 1).collect();
        let full = decode_expect(&group(GroupKind::FullAttention, 8, 128), &tokens);
        assert_eq!(full.reads, 100 * 2 * 2);
        let sw = decode_expect(&group(GroupKind::SlidingWindow { sliding_window: 32 }, 8, 128), &tokens);
        assert_eq!(sw.reads, 32 * 2 * 2);
        let tail: u64 = (68..100u32).fold(0u64, |a, p| a.wrapping_add(packed_tag(tokens[p as usize], p)));
        assert_eq!(sw.checksum, tail.wrapping_mul(4).wrapping_mul(2));
        let mla = decode_expect(&group(GroupKind::Mla, 16, 576), &tokens);
        assert_eq!(mla.reads, 100 * 2);
        let all: u64 = (0..100u32).fold(0u64, |a, p| a.wrapping_add(packed_tag(tokens[p as usize], p)));
        assert_eq!(mla.checksum, all.wrapping_mul(2));
    }

    #[test]
    fn state_expectation() {
        let g = GroupLayout {
            kind: GroupKind::MAMBA_STATE,
            kv_heads: 4,
            head_dim: 64,
            ..group(GroupKind::FullAttention, 4, 64)
        };
        let (digest, e) = state_expect(&g, &[5, 6]);
        assert_eq!(digest, StateDigest::of(&[5, 6]));
        assert_eq!(e.reads, 8);
        assert_eq!(e.checksum, u64::from(digest.checksum) * 8);
    }
}
