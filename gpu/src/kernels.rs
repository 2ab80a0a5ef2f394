//! CUDA C++ source of every kernel, compiled at run time with NVRTC for `sm_90`.
//!
//! The source lives in `gpu/src/cuda/` (one file per kernel family) and is concatenated here
//! into one string: the common kernels (prefill, zero, copy, state, MoE) compile unless `ATTN_ONLY`
//! is defined; `#define HD/HT` adds the tensor-core decode kernel `attn_mma` for one head dim
//! and head tile, `#define GHD` the CUDA-core `attn_generic`, `#define LD/GT` the CUDA-core MLA
//! kernel `attn_latent`, and `#define LDM/GTM/LNST` the tensor-core MLA kernel `attn_latent_mma`
//! (all four combine their flash-decoding splits in-kernel: the last CTA of a request's splits
//! does it). The content formulas mirror [`crate::content`]. No
//! headers are included, so NVRTC needs no CUDA include path.
//!
//! Verification records (one per request x group x op, 8 `u32`s):
//! `[0]` mismatched reads, `[1]` first mismatched position (state: first (layer, head) row),
//! `[2]` rows read, `[3]` unused, `[4..6]` wrapping `u64` sum of the tags read.

/// `u32`s per verification record.
pub const RECORD_WORDS: usize = 8;
/// Threads per CTA of the decode kernels (the lowering decides launch geometry).
pub use kvsim_core::device::lower::DECODE_THREADS;

/// Names of the kernels in the common module.
pub const COMMON_KERNELS: [&str; 9] = [
    "write_kv",
    "zero_blocks",
    "copy_blocks",
    "state_update",
    "moe_init",
    "moe_route",
    "moe_up",
    "moe_down",
    "spin",
];

/// The source: the prelude, then the common module and every decode kernel family.
pub const SOURCE: &str = concat!(
    include_str!("cuda/prelude.cuh"),
    include_str!("cuda/common.cu"),
    include_str!("cuda/attn_mma.cu"),
    include_str!("cuda/attn_generic.cu"),
    include_str!("cuda/attn_latent.cu"),
    include_str!("cuda/attn_latent_mma.cu"),
);

/// The source of a decode module: `defines` (each a full `#define` line) and only the decode
/// kernel they select (`ATTN_ONLY` leaves the common kernels out).
pub fn specialised(defines: &str) -> String {
    format!("#define ATTN_ONLY\n{defines}{SOURCE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_common_kernel_is_in_the_source() {
        for name in COMMON_KERNELS {
            assert!(SOURCE.contains(&format!("void {name}(")), "{name}");
        }
        assert!(SOURCE.contains("attn_mma("));
        assert!(SOURCE.contains("attn_latent("));
        assert!(SOURCE.contains("attn_generic("));
    }

    #[test]
    fn formulas_match_the_rust_twins() {
        // The constants of the hash functions appear verbatim in both implementations.
        for c in [
            "0x85ebca6bu",
            "0xc2b2ae35u",
            "0x9E3779B1u",
            "0x7F4A7C15u",
            "0x2545F491u",
            "1031u",
            "8191u",
            "0.875f",
        ] {
            assert!(SOURCE.contains(c), "{c}");
        }
    }
}
