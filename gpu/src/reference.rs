//! Float64 CPU reference for decode attention and the f32 mirror of the state recurrence, on
//! the same content the device holds ([`crate::content`]). Meant for small shapes.

use crate::content::{bf16_to_f32, kv_bits, state_input, PLANE_K, PLANE_V, STATE_DECAY};
use crate::layout::{GroupKind, GroupLayout};

/// Decode attention of one request over one group, in f64.
///
/// `q_bits` holds bf16 queries laid out `[layer][q_head][head_dim]`; the result is laid out
/// the same way. The attended range follows the group kind; MLA reads the latent as K and V.
pub fn decode_attention(g: &GroupLayout, tokens: &[u32], q_bits: &[u16]) -> Vec<f64> {
    let (layers, qh, dim) = (g.layers as usize, g.q_heads as usize, g.head_dim as usize);
    assert_eq!(q_bits.len(), layers * qh * dim, "query layout [layer][q_head][dim]");
    let group = g.gqa_group().max(1) as usize;
    let range = g.kind.attend_range(tokens.len() as u32);
    let scale = 1.0 / (dim as f64).sqrt();
    let (k_plane, v_plane) = if g.kind == GroupKind::Mla {
        (PLANE_K, PLANE_K)
    } else {
        (PLANE_K, PLANE_V)
    };
    let mut out = vec![0.0f64; layers * qh * dim];
    for layer in 0..layers {
        for head in 0..qh {
            let kvh = (head / group) as u32;
            let q: Vec<f64> = (0..dim)
                .map(|d| f64::from(bf16_to_f32(q_bits[(layer * qh + head) * dim + d])))
                .collect();
            let elem = |p: u32, d: usize, plane: u32| {
                f64::from(bf16_to_f32(kv_bits(
                    tokens[p as usize],
                    p,
                    layer as u32,
                    kvh,
                    d as u32,
                    plane,
                )))
            };
            let scores: Vec<f64> = range
                .clone()
                .map(|p| (0..dim).map(|d| q[d] * elem(p, d, k_plane)).sum::<f64>() * scale)
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let weights: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = weights.iter().sum();
            let o = &mut out[(layer * qh + head) * dim..][..dim];
            for (w, p) in weights.iter().zip(range.clone()) {
                for (d, slot) in o.iter_mut().enumerate() {
                    *slot += w * elem(p, d, v_plane);
                }
            }
            if total > 0.0 {
                o.iter_mut().for_each(|x| *x /= total);
            }
        }
    }
    out
}

/// State element `dim` (>= 2) of (layer, head) after consuming `tokens` from position 0,
/// computed exactly as the device does (f32 fused multiply-add).
pub fn state_value(tokens: &[u32], layer: u32, head: u32, dim: u32) -> f32 {
    tokens.iter().enumerate().fold(0.0f32, |s, (p, &t)| {
        s.mul_add(STATE_DECAY, state_input(t, p as u32, layer, head, dim))
    })
}

/// `‖out − ref‖ / ‖ref‖` (infinite when `out` holds a NaN or the lengths differ).
pub fn rel_error(out: &[f32], reference: &[f64]) -> f64 {
    if out.len() != reference.len() || out.iter().any(|x| !x.is_finite()) {
        return f64::INFINITY;
    }
    let diff: f64 = out
        .iter()
        .zip(reference)
        .map(|(&o, &r)| (f64::from(o) - r).powi(2))
        .sum();
    let norm: f64 = reference.iter().map(|r| r * r).sum();
    if norm == 0.0 {
        return diff.sqrt();
    }
    (diff / norm).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::content::{f32_to_bf16, query_bits};

    fn group(kind: GroupKind) -> GroupLayout {
        GroupLayout {
            kind,
            block_size_tokens: 16,
            layers: 1,
            kv_heads: 1,
            q_heads: 2,
            head_dim: 32,
            blocks_total: 4,
        }
    }

    #[test]
    fn one_position_returns_its_value_row() {
        let g = group(GroupKind::FullAttention);
        let q: Vec<u16> = (0..64).map(|d| query_bits(1, 0, 0, 0, d / 32, d % 32)).collect();
        let out = decode_attention(&g, &[7], &q);
        for d in 0..32u32 {
            let v = f64::from(bf16_to_f32(kv_bits(7, 0, 0, 0, d, PLANE_V)));
            assert!((out[d as usize] - v).abs() < 1e-12);
            assert!((out[32 + d as usize] - v).abs() < 1e-12);
        }
    }

    #[test]
    fn zero_query_averages_the_window() {
        let g = group(GroupKind::SlidingWindow { sliding_window: 3 });
        let tokens = [1, 2, 3, 4, 5];
        let out = decode_attention(&g, &tokens, &[f32_to_bf16(0.0); 64]);
        let mean: f64 = (2..5u32)
            .map(|p| f64::from(bf16_to_f32(kv_bits(tokens[p as usize], p, 0, 0, 9, PLANE_V))))
            .sum::<f64>()
            / 3.0;
        assert!((out[9] - mean).abs() < 1e-12);
    }

    #[test]
    fn mla_reads_the_latent_as_value() {
        let g = GroupLayout {
            kind: GroupKind::Mla,
            ..group(GroupKind::FullAttention)
        };
        let out = decode_attention(&g, &[11], &[f32_to_bf16(0.5); 64]);
        let v = f64::from(bf16_to_f32(kv_bits(11, 0, 0, 0, 5, PLANE_K)));
        assert!((out[5] - v).abs() < 1e-12);
    }

    #[test]
    fn rel_error_basics() {
        assert_eq!(rel_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((rel_error(&[1.1], &[1.0]) - 0.1).abs() < 1e-6);
        assert!(rel_error(&[f32::NAN], &[1.0]).is_infinite());
        assert!(rel_error(&[1.0], &[1.0, 2.0]).is_infinite());
    }

    #[test]
    fn state_recurrence_is_a_fold() {
        let a = state_value(&[1, 2, 3], 0, 1, 5);
        let x = |t, p| state_input(t, p, 0, 1, 5);
        let manual = 0.0f32
            .mul_add(STATE_DECAY, x(1, 0))
            .mul_add(STATE_DECAY, x(2, 1))
            .mul_add(STATE_DECAY, x(3, 2));
        assert_eq!(a, manual);
    }
}
