//! Test-only CPU emulation of `write_kv`, `attn_mma` and its split combine, lane by lane, with
//! `mma.sync.m16n8k16` emulated from the fragment layouts of the PTX ISA. It checks the index
//! and permutation logic of the CUDA source against the f64 reference without a GPU; keep it in
//! step with `gpu/src/cuda/attn_mma.cu`.
// Loops run over lane indices on purpose: each mirrors a line of the CUDA source.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use crate::content::{bf16_to_f32, f32_to_bf16, kv_bits, packed_tags, PLANE_K, PLANE_V};
use crate::layout::GroupLayout;
use crate::lower::aligned_lo;

/// `write_kv` for one request: writes positions `start..start+tokens.len()` into `pool` (MLA rows
/// padded to [`GroupLayout::row_elems`]).
pub fn prefill(pool: &mut [u16], g: &GroupLayout, tokens: &[u32], start: u32, table: &[u32]) {
    let (bs, hd, heads) = (g.block_size_tokens as usize, g.head_dim as usize, g.kv_heads as usize);
    let planes = g.planes() as usize;
    let row = g.row_elems() as usize;
    let head_elems = bs * row;
    let plane_elems = heads * head_elems;
    let block_elems = g.block_elems() as usize;
    for (i, &token) in tokens.iter().enumerate() {
        let pos = start as usize + i;
        let blk = table[pos / bs] as usize;
        if blk == 0 {
            continue;
        }
        let slot = pos % bs;
        for layer in 0..g.layers as usize {
            let base = blk * block_elems + layer * planes * plane_elems;
            for h in 0..heads {
                for d in 0..hd {
                    let (p, l, hh, dd) = (pos as u32, layer as u32, h as u32, d as u32);
                    pool[base + h * head_elems + slot * row + d] = kv_bits(token, p, l, hh, dd, PLANE_K);
                    if planes == 2 {
                        pool[base + plane_elems + h * head_elems + d * bs + slot] =
                            kv_bits(token, p, l, hh, dd, PLANE_V);
                    }
                }
            }
        }
    }
}

fn f(bits: u32) -> f32 {
    bf16_to_f32(bits as u16)
}

/// `mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32` over a warp: `c[lane] += A B`.
pub(crate) fn mma(c: &mut [[f32; 4]; 32], a: &[[u32; 4]; 32], b: &[[u32; 2]; 32]) {
    let mut am = [[0f32; 16]; 16];
    let mut bm = [[0f32; 8]; 16];
    for lane in 0..32 {
        let (g, t) = (lane / 4, lane % 4);
        for (r, row, col) in [
            (0, g, 2 * t),
            (1, g + 8, 2 * t),
            (2, g, 2 * t + 8),
            (3, g + 8, 2 * t + 8),
        ] {
            am[row][col] = f(a[lane][r] & 0xffff);
            am[row][col + 1] = f(a[lane][r] >> 16);
        }
        for (r, k) in [(0, 2 * t), (1, 2 * t + 8)] {
            bm[k][g] = f(b[lane][r] & 0xffff);
            bm[k + 1][g] = f(b[lane][r] >> 16);
        }
    }
    for lane in 0..32 {
        let (g, t) = (lane / 4, lane % 4);
        for (i, (row, col)) in [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]
            .into_iter()
            .enumerate()
        {
            c[lane][i] += (0..16).map(|k| am[row][k] * bm[k][col]).sum::<f32>();
        }
    }
}

pub(crate) fn shfl_xor<T: Copy>(v: &[T; 32], o: usize) -> [T; 32] {
    std::array::from_fn(|l| v[l ^ o])
}

pub(crate) fn pack(lo: f32, hi: f32) -> u32 {
    u32::from(f32_to_bf16(lo)) | (u32::from(f32_to_bf16(hi)) << 16)
}

fn u4(pool: &[u16], at: usize) -> [u32; 4] {
    std::array::from_fn(|i| u32::from(pool[at + 2 * i]) | (u32::from(pool[at + 2 * i + 1]) << 16))
}

/// Output of the emulated decode for one request: `[layer][q_head][dim]`, plus the number of
/// tag mismatches the verification found.
pub fn decode(f: &Fixture, split_tokens: u32, ht_size: usize) -> (Vec<f32>, u32) {
    let (pool, g, tokens, table, q) = (&f.pool[..], &f.g, &f.tokens[..], &f.read_table[..], &f.q[..]);
    let hd = g.head_dim as usize;
    let (bs, layers, kv_heads) = (g.block_size_tokens as i64, g.layers as usize, g.kv_heads as usize);
    let gq = g.gqa_group() as usize;
    let q_heads = g.q_heads as usize;
    let range = g.kind.attend_range(tokens.len() as u32);
    let (lo, hi) = (i64::from(range.start), i64::from(range.end));
    let nsplit = ((hi - i64::from(aligned_lo(range.start))) as u32)
        .div_ceil(split_tokens)
        .max(1) as usize;
    let head_elems = bs as usize * hd;
    let plane_elems = kv_heads * head_elems;
    let block_elems = layers * 2 * plane_elems;
    let scale_log2 = std::f32::consts::LOG2_E / (hd as f32).sqrt();
    let tags = packed_tags(tokens);
    let (kpairs, ndt) = (hd / 32, hd / 8);
    let mut part_o = vec![0f32; layers * q_heads * nsplit * hd];
    let mut part_ml = vec![0f32; layers * q_heads * nsplit * 2];
    let mut mism = 0u32;
    let tbl = |pos: i64| {
        if pos < hi {
            table[(pos / bs) as usize] as usize
        } else {
            0
        }
    };
    for layer in 0..layers {
        for kvh in 0..kv_heads {
            for split in 0..nsplit {
                for ht in 0..gq / ht_size {
                    let s_begin = (lo & !31) + (split as i64) * i64::from(split_tokens);
                    let s_end = hi.min(s_begin + i64::from(split_tokens));
                    let k_off = layer * 2 * plane_elems + kvh * head_elems;
                    let v_off = k_off + plane_elems;
                    let qh0 = kvh * gq + ht * ht_size;
                    let mut sm_o = vec![vec![vec![0f32; hd]; ht_size]; 4];
                    let mut sm_ml = vec![vec![[0f32; 2]; 16]; 4];
                    for warp in 0..4 {
                        // Per-lane registers.
                        let mut qa = vec![[[0u32; 4]; 32]; kpairs];
                        let mut qb = vec![[[0u32; 4]; 32]; kpairs];
                        for lane in 0..32 {
                            let (gid, tid) = (lane / 4, lane % 4);
                            let qrow = (layer * q_heads + qh0) * hd;
                            for j in 0..kpairs {
                                if gid < ht_size {
                                    qa[j][lane] = u4(q, qrow + gid * hd + 32 * j + tid * 8);
                                }
                                if gid + 8 < ht_size {
                                    qb[j][lane] = u4(q, qrow + (gid + 8) * hd + 32 * j + tid * 8);
                                }
                            }
                        }
                        let mut m0 = [f32::NEG_INFINITY; 32];
                        let mut m1 = [f32::NEG_INFINITY; 32];
                        let mut l0 = [0f32; 32];
                        let mut l1 = [0f32; 32];
                        let mut acc = vec![[[0f32; 4]; 32]; ndt];
                        let mut t0 = s_begin + 32 * warp as i64;
                        while t0 < s_end {
                            let mut sc = [[[0f32; 4]; 32]; 4];
                            for (tile, sct) in sc.iter_mut().enumerate() {
                                for j in 0..kpairs {
                                    let mut b0 = [[0u32; 2]; 32];
                                    let mut b1 = [[0u32; 2]; 32];
                                    let mut a0 = [[0u32; 4]; 32];
                                    let mut a1 = [[0u32; 4]; 32];
                                    for lane in 0..32 {
                                        let (gid, tid) = (lane as i64 / 4, lane % 4);
                                        let pos = t0
                                            + (gid >> 1) * 8
                                            + 4 * (tile as i64 >> 1)
                                            + 2 * (tile as i64 & 1)
                                            + (gid & 1);
                                        let row = tbl(pos) * block_elems + k_off + (pos % bs) as usize * hd;
                                        let kr = u4(pool, row + 8 * (4 * j + tid));
                                        if j == 0 && tid == 0 && ht == 0 && pos >= lo && pos < hi {
                                            let got = u64::from(kr[0]) | (u64::from(kr[1]) << 32);
                                            if got != tags[pos as usize] {
                                                mism += 1;
                                            }
                                        }
                                        b0[lane] = [kr[0], kr[1]];
                                        b1[lane] = [kr[2], kr[3]];
                                        a0[lane] = [qa[j][lane][0], qb[j][lane][0], qa[j][lane][1], qb[j][lane][1]];
                                        a1[lane] = [qa[j][lane][2], qb[j][lane][2], qa[j][lane][3], qb[j][lane][3]];
                                    }
                                    mma(sct, &a0, &b0);
                                    mma(sct, &a1, &b1);
                                }
                            }
                            let mut mx0 = [f32::NEG_INFINITY; 32];
                            let mut mx1 = [f32::NEG_INFINITY; 32];
                            for lane in 0..32 {
                                let tid = (lane % 4) as i64;
                                for (tile, sct) in sc.iter_mut().enumerate() {
                                    for e in 0..2 {
                                        let pos =
                                            t0 + tid * 8 + 4 * (tile as i64 >> 1) + 2 * (tile as i64 & 1) + e as i64;
                                        let ok = pos >= lo && pos < hi;
                                        sct[lane][e] = if ok {
                                            sct[lane][e] * scale_log2
                                        } else {
                                            f32::NEG_INFINITY
                                        };
                                        sct[lane][2 + e] = if ok {
                                            sct[lane][2 + e] * scale_log2
                                        } else {
                                            f32::NEG_INFINITY
                                        };
                                        mx0[lane] = mx0[lane].max(sct[lane][e]);
                                        mx1[lane] = mx1[lane].max(sct[lane][2 + e]);
                                    }
                                }
                            }
                            for o in [1, 2] {
                                let (s0, s1) = (shfl_xor(&mx0, o), shfl_xor(&mx1, o));
                                for lane in 0..32 {
                                    mx0[lane] = mx0[lane].max(s0[lane]);
                                    mx1[lane] = mx1[lane].max(s1[lane]);
                                }
                            }
                            let mut pa = [[[0u32; 4]; 32]; 2];
                            for lane in 0..32 {
                                let (mn0, mn1) = (m0[lane].max(mx0[lane]), m1[lane].max(mx1[lane]));
                                let mu0 = if mn0 == f32::NEG_INFINITY { 0.0 } else { mn0 };
                                let mu1 = if mn1 == f32::NEG_INFINITY { 0.0 } else { mn1 };
                                let (al0, al1) = ((m0[lane] - mu0).exp2(), (m1[lane] - mu1).exp2());
                                m0[lane] = mn0;
                                m1[lane] = mn1;
                                let (mut ps0, mut ps1) = (0f32, 0f32);
                                for sct in sc.iter_mut() {
                                    for e in 0..2 {
                                        sct[lane][e] = (sct[lane][e] - mu0).exp2();
                                        ps0 += sct[lane][e];
                                        sct[lane][2 + e] = (sct[lane][2 + e] - mu1).exp2();
                                        ps1 += sct[lane][2 + e];
                                    }
                                }
                                l0[lane] = l0[lane] * al0 + ps0;
                                l1[lane] = l1[lane] * al1 + ps1;
                                for a in acc.iter_mut() {
                                    a[lane][0] *= al0;
                                    a[lane][1] *= al0;
                                    a[lane][2] *= al1;
                                    a[lane][3] *= al1;
                                }
                                for (s, pas) in pa.iter_mut().enumerate() {
                                    pas[lane] = [
                                        pack(sc[2 * s][lane][0], sc[2 * s][lane][1]),
                                        pack(sc[2 * s][lane][2], sc[2 * s][lane][3]),
                                        pack(sc[2 * s + 1][lane][0], sc[2 * s + 1][lane][1]),
                                        pack(sc[2 * s + 1][lane][2], sc[2 * s + 1][lane][3]),
                                    ];
                                }
                            }
                            for (nt, a) in acc.iter_mut().enumerate() {
                                let mut w0 = [[0u32; 2]; 32];
                                let mut w1 = [[0u32; 2]; 32];
                                for lane in 0..32 {
                                    let (gid, tid) = (lane / 4, (lane % 4) as i64);
                                    let vpos = t0 + tid * 8;
                                    let vbase = tbl(vpos) * block_elems + v_off + (vpos % bs) as usize;
                                    let w = u4(pool, vbase + (nt * 8 + gid) * bs as usize);
                                    w0[lane] = [w[0], w[1]];
                                    w1[lane] = [w[2], w[3]];
                                    if nt == 0 && ht == 0 && gid < 4 {
                                        for e in 0..8 {
                                            let pos = vpos + e as i64;
                                            if pos >= lo && pos < hi {
                                                let got = (w[e >> 1] >> (16 * (e & 1))) & 0xffff;
                                                let want = ((tags[pos as usize] >> (16 * gid)) & 0xffff) as u32;
                                                if got != want {
                                                    mism += 1;
                                                }
                                            }
                                        }
                                    }
                                }
                                mma(a, &pa[0], &w0);
                                mma(a, &pa[1], &w1);
                            }
                            t0 += 128;
                        }
                        for o in [1, 2] {
                            let (s0, s1) = (shfl_xor(&l0, o), shfl_xor(&l1, o));
                            for lane in 0..32 {
                                l0[lane] += s0[lane];
                                l1[lane] += s1[lane];
                            }
                        }
                        for lane in 0..32 {
                            let (gid, tid) = (lane / 4, lane % 4);
                            if tid == 0 {
                                sm_ml[warp][gid] = [m0[lane], l0[lane]];
                                sm_ml[warp][gid + 8] = [m1[lane], l1[lane]];
                            }
                            for (nt, a) in acc.iter().enumerate() {
                                let d = nt * 8 + tid * 2;
                                if gid < ht_size {
                                    sm_o[warp][gid][d] = a[lane][0];
                                    sm_o[warp][gid][d + 1] = a[lane][1];
                                }
                                if gid + 8 < ht_size {
                                    sm_o[warp][gid + 8][d] = a[lane][2];
                                    sm_o[warp][gid + 8][d + 1] = a[lane][3];
                                }
                            }
                        }
                    }
                    for r in 0..ht_size {
                        for d in 0..hd {
                            let mm = (0..4).map(|w| sm_ml[w][r][0]).fold(f32::NEG_INFINITY, f32::max);
                            let (mut l, mut o) = (0f32, 0f32);
                            for w in 0..4 {
                                let mw = sm_ml[w][r][0];
                                let fct = if mw == f32::NEG_INFINITY { 0.0 } else { (mw - mm).exp2() };
                                l += sm_ml[w][r][1] * fct;
                                o += sm_o[w][r][d] * fct;
                            }
                            let prow = (layer * q_heads + qh0 + r) * nsplit + split;
                            part_o[prow * hd + d] = o;
                            if d == 0 {
                                part_ml[prow * 2] = mm;
                                part_ml[prow * 2 + 1] = l;
                            }
                        }
                    }
                }
            }
        }
    }
    (combine(&part_o, &part_ml, layers * q_heads, nsplit, hd), mism)
}

/// What an emulated decode reads: a pool prefilled with `ctx` tokens of one request through a
/// scattered table (blocks in reverse order, two spare blocks), the table the decode reads
/// (with `corrupt`, its last entry points at a block never written), the tokens, and queries
/// for two layers. `g.blocks_total` is set here.
pub(crate) struct Fixture {
    pub g: GroupLayout,
    pub pool: Vec<u16>,
    pub read_table: Vec<u32>,
    pub tokens: Vec<u32>,
    pub q: Vec<u16>,
}

impl Fixture {
    pub(crate) fn new(g: GroupLayout, ctx: u32, corrupt: bool, q_salt: u32) -> Fixture {
        let nblocks = ctx.div_ceil(g.block_size_tokens);
        let g = GroupLayout {
            blocks_total: nblocks + 2,
            ..g
        };
        let mut pool = vec![0u16; (g.block_elems() * u64::from(g.blocks_total)) as usize];
        let table: Vec<u32> = (0..nblocks).map(|i| nblocks - i).collect();
        let tokens: Vec<u32> = (0..ctx).map(|p| p * 7919 % 30011).collect();
        prefill(&mut pool, &g, &tokens, 0, &table);
        let mut read_table = table;
        if corrupt {
            *read_table.last_mut().expect("one block") = nblocks + 1; // never written
        }
        let (qh, hd) = (g.q_heads, g.head_dim);
        let q = (0..g.layers * qh * hd)
            .map(|i| crate::content::query_bits(5, q_salt, 0, i / (qh * hd), (i / hd) % qh, i % hd))
            .collect();
        Fixture {
            g,
            pool,
            read_table,
            tokens,
            q,
        }
    }
}

/// `combine_if_last` over every output row: `out = sum_s O_s 2^(M_s - M) / sum_s L_s 2^(M_s - M)`.
pub(crate) fn combine(part_o: &[f32], part_ml: &[f32], rows: usize, nsplit: usize, hd: usize) -> Vec<f32> {
    let mut out = vec![0f32; rows * hd];
    for row in 0..rows {
        let ml = &part_ml[row * nsplit * 2..];
        let mm = (0..nsplit).map(|s| ml[2 * s]).fold(f32::NEG_INFINITY, f32::max);
        let l: f32 = (0..nsplit)
            .filter(|&s| ml[2 * s] != f32::NEG_INFINITY)
            .map(|s| ml[2 * s + 1] * (ml[2 * s] - mm).exp2())
            .sum();
        for d in 0..hd {
            let o: f32 = (0..nsplit)
                .filter(|&s| ml[2 * s] != f32::NEG_INFINITY)
                .map(|s| part_o[(row * nsplit + s) * hd + d] * (ml[2 * s] - mm).exp2())
                .sum();
            out[row * hd + d] = if l > 0.0 { o / l } else { 0.0 };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::GroupKind;
    use crate::lower::AttnKernel;
    use crate::reference::{decode_attention, rel_error};

    fn check(kind: GroupKind, bs: u32, kv: u32, qh: u32, hd: u32, ctx: u32, split: u32, corrupt: bool) {
        let g = GroupLayout {
            kind,
            block_size_tokens: bs,
            layers: 2,
            kv_heads: kv,
            q_heads: qh,
            head_dim: hd,
            blocks_total: 0,
        };
        let f = Fixture::new(g, ctx, corrupt, 1);
        let (g, tokens, q) = (&f.g, &f.tokens, &f.q);
        let ht = AttnKernel::for_group(g).expect("attention").head_tile() as usize;
        let (out, mism) = decode(&f, split, ht);
        if corrupt {
            assert!(mism > 0);
            return;
        }
        assert_eq!(mism, 0);
        let reference = decode_attention(g, tokens, q);
        let err = rel_error(&out, &reference);
        assert!(
            err < 1e-2,
            "{kind:?} bs {bs} kv {kv} q {qh} d {hd} ctx {ctx} split {split}: rel err {err}"
        );
    }

    #[test]
    fn emulated_mma_kernel_matches_reference() {
        check(GroupKind::FullAttention, 16, 2, 8, 64, 100, 128, false);
        check(GroupKind::FullAttention, 16, 1, 16, 128, 77, 128, false);
        check(GroupKind::FullAttention, 32, 2, 2, 64, 200, 128, false);
        check(
            GroupKind::SlidingWindow { sliding_window: 48 },
            16,
            1,
            4,
            64,
            151,
            128,
            false,
        );
        check(
            GroupKind::ChunkedLocal {
                attention_chunk_size: 64,
            },
            16,
            1,
            4,
            64,
            130,
            128,
            false,
        );
        check(GroupKind::FullAttention, 16, 1, 32, 64, 60, 128, false); // two head tiles
    }

    #[test]
    fn emulated_verification_catches_an_unwritten_block() {
        check(GroupKind::FullAttention, 16, 1, 4, 64, 64, 128, true);
    }
}
