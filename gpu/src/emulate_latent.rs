//! Test-only CPU emulation of `attn_latent_mma` (the tensor-core MLA decode kernel), warp by
//! warp and lane by lane: the stage fill (runs of padded rows, zeroed past the end), `ldmatrix`
//! (plain and `.trans`) from the padded shared-memory rows, the four warps' partial scores summed
//! in shared memory, P with the lazily rescaled running maxima (`LTAU`), O = P V, the two warp
//! groups taking alternate tiles, their merge, and the split combine. It checks the fragment and index logic of the CUDA source against the
//! f64 reference without a GPU; keep it in step with `gpu/src/cuda/attn_latent_mma.cu`.
// Loops run over lane indices on purpose: each mirrors a line of the CUDA source.
#![allow(clippy::needless_range_loop)]

use crate::content::packed_tags;
use crate::emulate::{mma, pack, shfl_xor, Fixture};
use crate::layout::GroupLayout;

/// Positions per tile (`LTT`).
const TT: usize = 32;
/// Padded row strides (`LRED`, `LPS`).
const RED: usize = 40;
const PS: usize = 40;

/// `ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16`: lane `l` supplies the element index of
/// row `l % 8` of matrix `l / 8`; register `i` of every lane comes from matrix `i`.
fn ldsm4(smem: &[u16], row_at: impl Fn(usize) -> usize, trans: bool) -> [[u32; 4]; 32] {
    let mut out = [[0u32; 4]; 32];
    for i in 0..4 {
        let rows: Vec<&[u16]> = (0..8)
            .map(|r| &smem[row_at(8 * i + r)..row_at(8 * i + r) + 8])
            .collect();
        for (t, o) in out.iter_mut().enumerate() {
            let (lo, hi) = if trans {
                (rows[2 * (t % 4)][t / 4], rows[2 * (t % 4) + 1][t / 4])
            } else {
                (rows[t / 4][2 * (t % 4)], rows[t / 4][2 * (t % 4) + 1])
            };
            o[i] = u32::from(lo) | (u32::from(hi) << 16);
        }
    }
    out
}

/// Output of the emulated decode for one request, `[layer][q_head][dim]`, the tag mismatches
/// the verification found, and how many group tiles rescaled their running maxima. `split_tokens` is a multiple of 32; `ht` heads per CTA;
/// `tau` is the kernel's `LTAU` (0 rescales whenever a maximum grows).
pub fn decode(f: &Fixture, split_tokens: usize, ht: usize, tau: f32) -> (Vec<f32>, u32, u32) {
    let (pool, g, tokens, table, q) = (&f.pool[..], &f.g, &f.tokens[..], &f.read_table[..], &f.q[..]);
    let ld = g.head_dim as usize;
    let (bs, layers, gq) = (g.block_size_tokens as usize, g.layers as usize, g.q_heads as usize);
    let (mw, row) = (ld / 4, g.row_elems() as usize);
    let (lks, lnt) = (mw / 16, mw / 8);
    let (lo, hi) = (0usize, tokens.len());
    let nsplit = hi.div_ceil(split_tokens).max(1);
    let scale_log2 = std::f32::consts::LOG2_E / (ld as f32).sqrt();
    let tags = packed_tags(tokens);
    let block_elems = g.block_elems() as usize;
    let mut part_o = vec![0f32; layers * gq * nsplit * ld];
    let mut part_ml = vec![0f32; layers * gq * nsplit * 2];
    let mut mism = 0u32;
    let mut rescales = 0u32;
    for layer in 0..layers {
        for split in 0..nsplit {
            for h in 0..gq / ht {
                let s_begin = split * split_tokens;
                let s_end = hi.min(s_begin + split_tokens);
                let ntiles = s_end.saturating_sub(s_begin).div_ceil(TT);
                let orow0 = layer * gq + h * ht;
                // Registers of the four warps.
                let mut qa = vec![vec![[[0u32; 4]; 32]; lks]; 4];
                for w in 0..4 {
                    for lane in 0..32 {
                        let (gid, tid) = (lane / 4, lane % 4);
                        let qb = |r: usize, c: usize| -> u32 {
                            if r < ht {
                                let at = (orow0 + r) * ld + w * mw + c;
                                u32::from(q[at]) | (u32::from(q[at + 1]) << 16)
                            } else {
                                0
                            }
                        };
                        for ks in 0..lks {
                            let c = 16 * ks + 2 * tid;
                            qa[w][ks][lane] = [qb(gid, c), qb(gid + 8, c), qb(gid, c + 8), qb(gid + 8, c + 8)];
                        }
                    }
                }
                // Softmax state of the two warp groups (group g takes tiles g, g + 2, ...).
                let mut acc_g = vec![vec![vec![[[0f32; 4]; 32]; lnt]; 4]; 2];
                let mut m0_g = [[[f32::NEG_INFINITY; 32]; 4]; 2];
                let mut m1_g = [[[f32::NEG_INFINITY; 32]; 4]; 2];
                let mut l0_g = [[[0f32; 32]; 4]; 2];
                let mut l1_g = [[[0f32; 32]; 4]; 2];
                let mut tile = vec![0u16; TT * row];
                for t in 0..ntiles {
                    let g = t % 2;
                    let (acc, m0, m1, l0, l1) = (&mut acc_g[g], &mut m0_g[g], &mut m1_g[g], &mut l0_g[g], &mut l1_g[g]);
                    let t0 = s_begin + t * TT;
                    // The stage fill: runs of `run` padded rows copied whole from their block,
                    // runs that start at or after hi zeroed.
                    let run = TT.min(1 << bs.trailing_zeros());
                    for r in 0..TT {
                        let start = t0 + r - r % run;
                        let pos = t0 + r;
                        for d in 0..row {
                            tile[r * row + d] = if start < hi {
                                pool[table[start / bs] as usize * block_elems + layer * bs * row + (pos % bs) * row + d]
                            } else {
                                0
                            };
                        }
                    }
                    if h == 0 {
                        for r in 0..TT {
                            let pos = t0 + r;
                            if pos >= lo && pos < hi {
                                let got = (0..4).fold(0u64, |a, i| a | (u64::from(tile[r * row + i]) << (16 * i)));
                                if got != tags[pos] {
                                    mism += 1;
                                }
                            }
                        }
                    }
                    // S partials into sm_red.
                    let mut red = vec![0f32; 4 * 16 * RED];
                    for w in 0..4 {
                        let mut sp = [[[0f32; 4]; 32]; 4];
                        for ks in 0..lks {
                            for jp in 0..2 {
                                let b = ldsm4(
                                    &tile,
                                    |l| {
                                        let tok = 16 * jp + ((l >> 4) << 3) + (l & 7);
                                        tok * row + w * mw + 16 * ks + (((l >> 3) & 1) << 3)
                                    },
                                    false,
                                );
                                let b01: [[u32; 2]; 32] = std::array::from_fn(|l| [b[l][0], b[l][1]]);
                                let b23: [[u32; 2]; 32] = std::array::from_fn(|l| [b[l][2], b[l][3]]);
                                mma(&mut sp[2 * jp], &qa[w][ks], &b01);
                                mma(&mut sp[2 * jp + 1], &qa[w][ks], &b23);
                            }
                        }
                        for lane in 0..32 {
                            let (gid, tid) = (lane / 4, lane % 4);
                            for j in 0..4 {
                                let at = (w * 16 + gid) * RED + 8 * j + 2 * tid;
                                red[at] = sp[j][lane][0];
                                red[at + 1] = sp[j][lane][1];
                                let at = (w * 16 + gid + 8) * RED + 8 * j + 2 * tid;
                                red[at] = sp[j][lane][2];
                                red[at + 1] = sp[j][lane][3];
                            }
                        }
                    }
                    // Each warp finishes 8 positions: sums, scale, mask, row maxima.
                    let mut s = [[[0f32; 4]; 32]; 4];
                    let mut mx = [[f32::NEG_INFINITY; 16]; 4];
                    for w in 0..4 {
                        let (mut x0, mut x1) = ([0f32; 32], [0f32; 32]);
                        for lane in 0..32 {
                            let (gid, tid) = (lane / 4, lane % 4);
                            for ww in 0..4 {
                                let a = (ww * 16 + gid) * RED + 8 * w + 2 * tid;
                                let b = (ww * 16 + gid + 8) * RED + 8 * w + 2 * tid;
                                s[w][lane][0] += red[a];
                                s[w][lane][1] += red[a + 1];
                                s[w][lane][2] += red[b];
                                s[w][lane][3] += red[b + 1];
                            }
                            let pa = t0 + 8 * w + 2 * tid;
                            for e in 0..2 {
                                let ok = pa + e >= lo && pa + e < hi;
                                for r in [e, 2 + e] {
                                    s[w][lane][r] = if ok {
                                        s[w][lane][r] * scale_log2
                                    } else {
                                        f32::NEG_INFINITY
                                    };
                                }
                            }
                            x0[lane] = s[w][lane][0].max(s[w][lane][1]);
                            x1[lane] = s[w][lane][2].max(s[w][lane][3]);
                        }
                        for o in [1, 2] {
                            let (a, b) = (shfl_xor(&x0, o), shfl_xor(&x1, o));
                            for lane in 0..32 {
                                x0[lane] = x0[lane].max(a[lane]);
                                x1[lane] = x1[lane].max(b[lane]);
                            }
                        }
                        for gid in 0..8 {
                            mx[w][gid] = x0[4 * gid];
                            mx[w][gid + 8] = x1[4 * gid];
                        }
                    }
                    // P into sm_p with the group's running maxima (the same in every warp and
                    // every lane of a row), unless some score exceeds them by more than tau:
                    // then the whole group takes the new maxima and rescales first.
                    let grew = (0..4).any(|w| {
                        (0..32).any(|lane| {
                            let gid = lane / 4;
                            mx[w][gid] > m0[w][lane] + tau || mx[w][gid + 8] > m1[w][lane] + tau
                        })
                    });
                    rescales += u32::from(grew);
                    let mut p = vec![0u16; 16 * PS];
                    for w in 0..4 {
                        for lane in 0..32 {
                            let (gid, tid) = (lane / 4, lane % 4);
                            if grew {
                                let n0 = (0..4).fold(m0[w][lane], |a, ww| a.max(mx[ww][gid]));
                                let n1 = (0..4).fold(m1[w][lane], |a, ww| a.max(mx[ww][gid + 8]));
                                let nu0 = if n0 == f32::NEG_INFINITY { 0.0 } else { n0 };
                                let nu1 = if n1 == f32::NEG_INFINITY { 0.0 } else { n1 };
                                let (al0, al1) = ((m0[w][lane] - nu0).exp2(), (m1[w][lane] - nu1).exp2());
                                m0[w][lane] = n0;
                                m1[w][lane] = n1;
                                l0[w][lane] *= al0;
                                l1[w][lane] *= al1;
                                for a in acc[w].iter_mut() {
                                    a[lane][0] *= al0;
                                    a[lane][1] *= al0;
                                    a[lane][2] *= al1;
                                    a[lane][3] *= al1;
                                }
                            }
                            let mu = |m: f32| if m == f32::NEG_INFINITY { 0.0 } else { m };
                            let (mu0, mu1) = (mu(m0[w][lane]), mu(m1[w][lane]));
                            let pv: [f32; 4] =
                                std::array::from_fn(|i| (s[w][lane][i] - if i < 2 { mu0 } else { mu1 }).exp2());
                            l0[w][lane] += pv[0] + pv[1];
                            l1[w][lane] += pv[2] + pv[3];
                            for (r, lo_hi) in [(gid, pack(pv[0], pv[1])), (gid + 8, pack(pv[2], pv[3]))] {
                                p[r * PS + 8 * w + 2 * tid] = lo_hi as u16;
                                p[r * PS + 8 * w + 2 * tid + 1] = (lo_hi >> 16) as u16;
                            }
                        }
                    }
                    // O += P V.
                    for w in 0..4 {
                        for kk in 0..2 {
                            let a = ldsm4(
                                &p,
                                |l| ((l & 7) + (((l >> 3) & 1) << 3)) * PS + 16 * kk + ((l >> 4) << 3),
                                false,
                            );
                            for np in 0..lnt / 2 {
                                let b = ldsm4(
                                    &tile,
                                    |l| {
                                        let tok = 16 * kk + (((l >> 3) & 1) << 3) + (l & 7);
                                        tok * row + w * mw + 16 * np + ((l >> 4) << 3)
                                    },
                                    true,
                                );
                                let b01: [[u32; 2]; 32] = std::array::from_fn(|l| [b[l][0], b[l][1]]);
                                let b23: [[u32; 2]; 32] = std::array::from_fn(|l| [b[l][2], b[l][3]]);
                                mma(&mut acc[w][2 * np], &a, &b01);
                                mma(&mut acc[w][2 * np + 1], &a, &b23);
                            }
                        }
                    }
                }
                // Row sums over lane quads and each group's warps.
                let mut sm_l = [[[0f32; 16]; 4]; 2];
                for g in 0..2 {
                    for w in 0..4 {
                        for o in [1, 2] {
                            let (a, b) = (shfl_xor(&l0_g[g][w], o), shfl_xor(&l1_g[g][w], o));
                            for lane in 0..32 {
                                l0_g[g][w][lane] += a[lane];
                                l1_g[g][w][lane] += b[lane];
                            }
                        }
                        for gid in 0..8 {
                            sm_l[g][w][gid] = l0_g[g][w][4 * gid];
                            sm_l[g][w][gid + 8] = l1_g[g][w][4 * gid];
                        }
                    }
                }
                // Group 0 merges group 1's (M, L, O) and writes the partial rows.
                for w in 0..4 {
                    for lane in 0..32 {
                        let (gid, tid) = (lane / 4, lane % 4);
                        for hr in 0..2 {
                            let r = gid + 8 * hr;
                            if r >= ht {
                                continue;
                            }
                            let m_of = |g: usize| if hr == 0 { m0_g[g][w][lane] } else { m1_g[g][w][lane] };
                            let (ma, mb) = (m_of(0), m_of(1));
                            let (la, lb): (f32, f32) = (
                                (0..4).map(|ww| sm_l[0][ww][r]).sum(),
                                (0..4).map(|ww| sm_l[1][ww][r]).sum(),
                            );
                            let big_m = ma.max(mb);
                            let f = |m: f32| {
                                if m == f32::NEG_INFINITY {
                                    0.0
                                } else {
                                    (m - big_m).exp2()
                                }
                            };
                            let (fa, fb) = (f(ma), f(mb));
                            let prow = (orow0 + r) * nsplit + split;
                            for n in 0..lnt {
                                let d = w * mw + 8 * n + 2 * tid;
                                for e in 0..2 {
                                    part_o[prow * ld + d + e] =
                                        acc_g[0][w][n][lane][2 * hr + e] * fa + acc_g[1][w][n][lane][2 * hr + e] * fb;
                                }
                            }
                            part_ml[prow * 2] = big_m;
                            part_ml[prow * 2 + 1] = la * fa + lb * fb;
                        }
                    }
                }
            }
        }
    }
    (
        crate::emulate::combine(&part_o, &part_ml, layers * gq, nsplit, ld),
        mism,
        rescales,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::GroupKind;
    use crate::reference::{decode_attention, rel_error};

    fn check(bs: u32, qh: u32, ld: u32, ctx: u32, split: usize, ht: usize, corrupt: bool) -> u32 {
        let g = GroupLayout {
            kind: GroupKind::Mla,
            block_size_tokens: bs,
            layers: 2,
            kv_heads: 1,
            q_heads: qh,
            head_dim: ld,
            blocks_total: 0,
        };
        let f = Fixture::new(g, ctx, corrupt, 3);
        // The kernel's threshold, and 0: a rescale whenever a maximum grows.
        let runs: Vec<_> = [8.0, 0.0]
            .iter()
            .map(|&tau| (tau, decode(&f, split, ht, tau)))
            .collect();
        for (tau, (out, mism, _)) in &runs {
            if !corrupt {
                assert_eq!(*mism, 0);
                let err = rel_error(out, &decode_attention(&f.g, &f.tokens, &f.q));
                assert!(
                    err < 1e-2,
                    "bs {bs} q {qh} ld {ld} ctx {ctx} split {split} tau {tau}: rel err {err}"
                );
            }
        }
        // Lazy rescaling skips some rescales: a threshold of 0 takes more of them.
        let (lazy, eager) = (runs[0].1 .2, runs[1].1 .2);
        assert!(lazy >= 1 && lazy <= eager, "rescales: lazy {lazy}, eager {eager}");
        runs[0].1 .1
    }

    #[test]
    fn emulated_latent_mma_kernel_matches_reference() {
        check(16, 16, 576, 100, 128, 16, false); // the DeepSeek shape, a partial last tile
        check(64, 16, 576, 200, 64, 16, false); // four splits, blocks of 64
        check(16, 8, 512, 45, 256, 8, false); // 8 heads: the upper 8 MMA rows are padding
        check(32, 32, 64, 70, 128, 16, false); // two head tiles, the narrowest width
    }

    #[test]
    fn lazy_rescaling_skips_rescales_and_keeps_the_result() {
        let g = GroupLayout {
            kind: GroupKind::Mla,
            block_size_tokens: 16,
            layers: 2,
            kv_heads: 1,
            q_heads: 16,
            head_dim: 576,
            blocks_total: 0,
        };
        let f = Fixture::new(g, 100, false, 3);
        let (lazy_out, _, lazy) = decode(&f, 128, 16, 8.0);
        let (eager_out, _, eager) = decode(&f, 128, 16, 0.0);
        // One rescale per group and layer (the first tile) against one per growing maximum.
        assert_eq!(lazy, 4);
        assert!(eager > lazy, "eager {eager}");
        let reference = decode_attention(&f.g, &f.tokens, &f.q);
        assert!(rel_error(&lazy_out, &reference) < 1e-2 && rel_error(&eager_out, &reference) < 1e-2);
    }

    #[test]
    fn emulated_latent_mma_verification_catches_an_unwritten_block() {
        assert!(check(16, 16, 576, 64, 128, 16, true) > 0);
    }
}
