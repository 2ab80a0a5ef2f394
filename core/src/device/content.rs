//! What a block holds, as a pure function of the tokens written into it.
//!
//! Every formula here has a twin in the GPU executor's kernel source (`kvsim_gpu::kernels`);
//! the unit tests pin the values so that a change on one side only is caught here, and the
//! device self-check catches the rest.
//!
//! * K/V element `(token, position, layer, head, dim, plane)` is `(b - 128) / 128` for a byte `b`,
//!   exact in bf16. Dims 0..4 of every K and V row (and of every MLA latent row) carry the
//!   position's *tag*: the four bytes of `tag32(token, position)`. Reading those four bf16 values
//!   back as one `u64` gives the packed tag that decode kernels compare per position.
//! * The checksum a decode accumulates is the wrapping sum of the packed tags it read (K and V).
//! * A recurrent-state row starts with a digest `(tokens consumed, fold of their tags)`; a
//!   zeroed block is the valid initial state.

/// murmur3's 32-bit finalizer.
pub fn fmix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// The identity of `token` at `position`.
pub fn tag32(token: u32, position: u32) -> u32 {
    fmix32(token.wrapping_mul(0x9E37_79B1) ^ fmix32(position.wrapping_add(0x7F4A_7C15)))
}

/// bf16 bits of `(b - 128) / 128` for the low byte of `b` (exact in bf16).
pub fn byte_bf16(b: u32) -> u16 {
    let v = ((b & 0xff) as i32 - 128) as f32 * (1.0 / 128.0);
    (v.to_bits() >> 16) as u16
}

/// The f32 value of bf16 bits.
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// bf16 bits of `x`, rounded to nearest even (NaN stays NaN).
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// Hash for the non-tag elements.
pub fn content_hash(token: u32, position: u32, layer: u32, head: u32, dim: u32, plane: u32) -> u32 {
    let coord = ((layer.wrapping_mul(1031).wrapping_add(head))
        .wrapping_mul(8191)
        .wrapping_add(dim))
    .wrapping_mul(4)
    .wrapping_add(plane)
    .wrapping_add(0x2545_F491);
    fmix32(tag32(token, position) ^ fmix32(coord))
}

/// Plane index of K (and of the MLA latent).
pub const PLANE_K: u32 = 0;
/// Plane index of V.
pub const PLANE_V: u32 = 1;
/// Plane index the recurrent-state inputs hash with.
pub const PLANE_STATE: u32 = 2;
/// Plane index the MoE activations hash with.
pub const PLANE_MOE: u32 = 3;
/// Dims at the start of every row that carry the tag.
pub const TAG_DIMS: u32 = 4;

/// The token of a position that holds zeros: synthetic KV materialised as zeros
/// (`kvsim replay --backend gpu --synthetic-kv zero`). Every element of its K/V rows is 0, so
/// its packed tag is 0; no plan token maps to it (`lower_plan` keeps token ids below it).
pub const ZERO_TOKEN: u32 = u32::MAX;

/// bf16 bits of one K/V element.
pub fn kv_bits(token: u32, position: u32, layer: u32, head: u32, dim: u32, plane: u32) -> u16 {
    if token == ZERO_TOKEN {
        0
    } else if dim < TAG_DIMS {
        byte_bf16(tag32(token, position) >> (8 * dim))
    } else {
        byte_bf16(content_hash(token, position, layer, head, dim, plane))
    }
}

/// The four tag elements of a row read as one little-endian `u64` (what the kernels compare).
pub fn packed_tag(token: u32, position: u32) -> u64 {
    if token == ZERO_TOKEN {
        return 0;
    }
    let tag = tag32(token, position);
    (0..TAG_DIMS).fold(0u64, |acc, d| acc | (u64::from(byte_bf16(tag >> (8 * d))) << (16 * d)))
}

/// Packed tags of `tokens` at positions `0..tokens.len()`.
pub fn packed_tags(tokens: &[u32]) -> Vec<u64> {
    tokens
        .iter()
        .enumerate()
        .map(|(p, &t)| packed_tag(t, p as u32))
        .collect()
}

/// Input of the recurrence for state element `dim` (dims 0 and 1 hold the digest).
pub fn state_input(token: u32, position: u32, layer: u32, head: u32, dim: u32) -> f32 {
    let b = content_hash(token, position, layer, head, dim, PLANE_STATE);
    ((b & 0xff) as i32 - 128) as f32 * (1.0 / 128.0)
}

/// Decay of the recurrence `s = s * STATE_DECAY + x` (f32 fused multiply-add on both sides).
pub const STATE_DECAY: f32 = 0.875;

/// The digest a state row carries: how many tokens it consumed and a fold of their tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StateDigest {
    /// Tokens the state consumed.
    pub tokens: u32,
    /// A fold of their content tags.
    pub checksum: u32,
}

impl StateDigest {
    /// The digest after also consuming `tokens`, the first at position `self.tokens`.
    pub fn consume(self, tokens: &[u32]) -> StateDigest {
        let mut h = self.checksum;
        for (i, &t) in tokens.iter().enumerate() {
            h = fmix32(h ^ tag32(t, self.tokens + i as u32));
        }
        StateDigest {
            tokens: self.tokens + tokens.len() as u32,
            checksum: h,
        }
    }

    /// The digest of a state that consumed exactly `history` from position 0.
    pub fn of(history: &[u32]) -> StateDigest {
        StateDigest::default().consume(history)
    }
}

/// Query element `(seed, salt, seq, layer, head, dim)` as bf16 bits, uniform in about [-1, 1).
pub fn query_bits(seed: u64, salt: u32, seq: u32, layer: u32, head: u32, dim: u32) -> u16 {
    let h = fmix32(
        (seed as u32)
            ^ fmix32((seed >> 32) as u32 ^ salt.wrapping_mul(0x27d4_eb2d))
            ^ fmix32(
                seq.wrapping_mul(0x1656_67b1) ^ fmix32(layer.wrapping_mul(0x9E37_79B1) ^ fmix32(head ^ (dim << 12))),
            ),
    );
    let v = (h >> 8) as f32 * (1.0 / 8_388_608.0) - 1.0;
    f32_to_bf16(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fmix_and_tag_are_pinned() {
        // Pinned values: the CUDA twin must produce the same (checked on the device by the
        // self-check, which compares in-kernel tags with these).
        assert_eq!(fmix32(0), 0);
        assert_eq!(fmix32(1), 0x514e_28b7);
        assert_ne!(tag32(1, 0), tag32(0, 1));
        assert_ne!(tag32(5, 7), tag32(5, 8));
    }

    #[test]
    fn byte_values_are_exact_in_bf16() {
        for b in 0..256u32 {
            let bits = byte_bf16(b);
            let v = bf16_to_f32(bits);
            assert_eq!(v, (b as i32 - 128) as f32 / 128.0);
            assert_eq!(f32_to_bf16(v), bits, "round trip of byte {b}");
        }
    }

    #[test]
    fn packed_tag_is_the_first_four_elements() {
        let (token, pos) = (4242, 77);
        let packed = packed_tag(token, pos);
        for d in 0..4 {
            let elem = kv_bits(token, pos, 3, 5, d, PLANE_V);
            assert_eq!(((packed >> (16 * d)) & 0xffff) as u16, elem);
            // Tags do not depend on layer, head or plane.
            assert_eq!(kv_bits(token, pos, 0, 0, d, PLANE_K), elem);
        }
        // A zeroed row never looks like a tag of an ordinary token at a small position; it is
        // exactly what a zero position (synthetic KV as zeros) must hold.
        assert!((0..1000).all(|p| packed_tag(p * 7, p) != 0));
        assert_eq!(packed_tag(ZERO_TOKEN, 5), 0);
        assert!((0..8).all(|d| kv_bits(ZERO_TOKEN, 5, 1, 0, d, PLANE_V) == 0));
    }

    #[test]
    fn bf16_rounding_is_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
    }

    #[test]
    fn state_digest_folds_in_order() {
        let a = StateDigest::of(&[1, 2, 3]);
        let b = StateDigest::of(&[1, 2]).consume(&[3]);
        assert_eq!(a, b);
        assert_eq!(a.tokens, 3);
        assert_ne!(StateDigest::of(&[1, 3, 2]), a);
        assert_eq!(StateDigest::of(&[]), StateDigest::default());
    }

    #[test]
    fn queries_are_bounded_and_seed_dependent() {
        let q: Vec<f32> = (0..512).map(|d| bf16_to_f32(query_bits(9, 0, 1, 2, 3, d))).collect();
        assert!(q.iter().all(|v| (-1.0..=1.0).contains(v)));
        assert_ne!(query_bits(9, 0, 1, 2, 3, 4), query_bits(10, 0, 1, 2, 3, 4));
        let mean = q.iter().sum::<f32>() / q.len() as f32;
        assert!(mean.abs() < 0.2, "mean {mean}");
    }
}
