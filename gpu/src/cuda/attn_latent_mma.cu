// ---------------------------------------------------------------- MLA latent decode (tensor cores)
// grid (nsplit * head_tiles, seqs, layers), 256 threads, dynamic shared memory (latent_mma_smem).
// Two groups of four warps take alternate 32-position tiles (group g: tiles g, g + 2, ...), each
// with its own softmax state, so that one group's MMAs overlap the other's barriers and
// reductions; they merge at the end. Tiles sit in LNST shared-memory stages, filled with Hopper
// bulk copies (cp.async.bulk) that complete on the stage's mbarrier. Inside a group, warp w
// owns latent dims [w*LMW, (w+1)*LMW): it multiplies its slice of the tile with its Q slice
// (S partial, mma.sync m16n8k16, heads as the 16 rows), the four partials are summed in shared
// memory, each warp turns 8 positions into P, and every warp multiplies P (16 x 32) by its V
// slice (V = K = the latent, read transposed with ldmatrix.trans). With nsplit > 1 the partial
// rows go to latent_combine.
#ifdef LDM
#define LMW (LDM / 4)
#define LKS (LMW / 16)
#define LNT (LMW / 8)
#define LNCH (LDM / 8)
#define LTT 32
#define LROW (LDM + MLA_ROW_PAD)
#define LRED 40
#define LPS 40
// Diagnostic builds (timing only, results are wrong): LAT_DIAG_NOMMA drops the MMAs,
// LAT_DIAG_NOLOAD the tile copies and waits, LAT_DIAG_NOCOMBINE the split combine's work.
#ifdef LAT_DIAG_NOMMA
#define LAT_MMA(...) ((void)0)
#else
#define LAT_MMA(...) mma16816(__VA_ARGS__)
#endif
#ifdef LAT_DIAG_NOLOAD
#define LAT_NOLOAD 1
#else
#define LAT_NOLOAD 0
#endif
__device__ __forceinline__ u32 smem_addr(const void* p) {
  u64 a; asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p)); return (u32)a;
}
__device__ __forceinline__ void ldsm4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldsm4t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
}
// Barrier of one group's 128 threads (ids 1 and 2; 0 is __syncthreads).
__device__ __forceinline__ void group_sync(int grp) {
  asm volatile("bar.sync %0, 128;" :: "r"(grp + 1) : "memory");
}

extern "C" __global__ void __launch_bounds__(256, 1) attn_latent_mma(DECODE_PARAMS) {
  extern __shared__ __align__(16) unsigned char sm_raw[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tid = lane & 3;
  const int grp = warp >> 2, wg = warp & 3;
  // Shared memory, in order (lower::latent_mma_smem mirrors it); per-group parts are [2][...].
  u16* sm_kv = (u16*)sm_raw;                                        // [LNST][LTT][LROW]
  float* red_all = (float*)(sm_kv + LNST * LTT * LROW);             // [2][4][16][LRED]
  u16* p_all = (u16*)(red_all + 2 * 4 * 16 * LRED);                 // [2][16][LPS]
  float* mx_all = (float*)(p_all + 2 * 16 * LPS);                   // [2][4][16]
  float* sm_l = mx_all + 2 * 64;                                    // [2][4][16]
  float* sm_ml = sm_l + 2 * 64;                                     // [16][2]: group 1's (M, L)
  float* sm_red = red_all + grp * (4 * 16 * LRED);
  u16* sm_p = p_all + grp * (16 * LPS);
  float* sm_mx = mx_all + grp * 64;
  const int head_tiles = G / GTM;
  const int split = blockIdx.x / head_tiles;
  const int ht = blockIdx.x - split * head_tiles;
  const int seq = blockIdx.y;
  const int layer = blockIdx.z;
  const int lo = lo_arr[seq], hi = hi_arr[seq];
  const int s_begin = (lo & ~31) + split * split_tokens;
  const int s_end = min(hi, s_begin + split_tokens);
  const int ntiles = s_end > s_begin ? (s_end - s_begin + LTT - 1) / LTT : 0;
  const bool verifier = ht == 0;
  const size_t block_elems = (size_t)layers * bs * LROW;
  const size_t layer_off = (size_t)layer * bs * LROW;
  const u32* tbl = tables + (size_t)seq * table_stride;
  const u64* tags = expected + (size_t)seq * exp_stride;
  const int qh0 = ht * GTM;
  const int d0 = wg * LMW;
  const size_t orow0 = ((size_t)seq * layers + layer) * G + qh0;

  // Loads: rows come in runs of `run` positions (the largest power of two dividing the block
  // size, at most a tile), contiguous and padded alike in the pool and in shared memory, so one
  // bulk copy per run (lane r of the issuing warp copies the run starting at row r) fills a
  // stage. Runs starting at or after hi are zeroed with plain stores first. Warp 0 fills every
  // stage at the start; afterwards the group that finishes a tile refills its stage with the
  // tile LNST ahead, its block ids looked up while the tile was computed. (One bulk copy per
  // row, and 16-byte cp.async per thread before that, ran at 11-58% of the copy bandwidth: the
  // per-request cost of small copies, not the bytes, was the limit.)
  __shared__ __align__(8) u64 sm_bar[LNST];
  if (threadIdx.x == 0) {
    #pragma unroll
    for (int s = 0; s < LNST; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&sm_bar[s])) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int run = min(LTT, bs & -bs);
  auto row_blk = [&](int T) -> u32 {
    const int pos = s_begin + T * LTT + lane;
    return (T < ntiles && lane % run == 0 && pos < hi) ? __ldg(tbl + pos / bs) : 0xffffffffu;
  };
  auto issue = [&](int T, u32 blk) {  // one whole warp
    const int st = T % LNST;
    const u32 bar = smem_addr(&sm_bar[st]);
    const int t0 = s_begin + T * LTT;
    u16* dst = sm_kv + st * LTT * LROW + lane * LROW;
    if (t0 + lane - lane % run >= hi) {
      #pragma unroll 8
      for (int i = 0; i < LNCH; ++i) ((uint4*)dst)[i] = make_uint4(0u, 0u, 0u, 0u);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncwarp();  // the zeroed rows precede lane 0's arrive (a release) below
    const bool lead = blk != 0xffffffffu;
    const u32 copies = (u32)__popc(__ballot_sync(0xffffffffu, lead));
    const u32 run_bytes = (u32)(run * LROW * 2);
    if (lane == 0)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(copies * run_bytes) : "memory");
    if (lead) {
      const u16* src = pool + (size_t)blk * block_elems + layer_off + (size_t)((t0 + lane) % bs) * LROW;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   :: "r"(smem_addr(dst)), "l"(src), "r"(run_bytes), "r"(bar) : "memory");
    }
  };
  auto wait_tile = [&](int T) {
    const u32 bar = smem_addr(&sm_bar[T % LNST]), parity = (u32)((T / LNST) & 1);
    asm volatile("{\n\t.reg .pred p;\n\tWAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
                 "@!p bra WAIT_%=;\n\t}" :: "r"(bar), "r"(parity) : "memory");
  };
  if (warp == 0 && !LAT_NOLOAD) {
    u32 pb[LNST];
    #pragma unroll
    for (int s = 0; s < LNST; ++s) pb[s] = row_blk(s);
    #pragma unroll
    for (int s = 0; s < LNST; ++s) if (s < ntiles) issue(s, pb[s]);
  }
  // The verifier's expected tags (lanes 0-7 of each warp: rows 8 wg + lane), loaded a tile ahead.
  auto tag_at = [&](int T) -> u64 {
    const int pos = s_begin + T * LTT + wg * 8 + lane;
    return (T < ntiles && pos >= lo && pos < hi) ? __ldg(tags + pos) : 0ull;
  };
  u64 next_tag = verifier && lane < 8 ? tag_at(grp) : 0ull;

  // The warp's Q slice as A fragments (rows >= GTM are zero).
  u32 qa[LKS][4];
  {
    const u16* qb = q + orow0 * LDM + d0;
    #pragma unroll
    for (int ks = 0; ks < LKS; ++ks) {
      const int c = 16 * ks + 2 * tid;
      qa[ks][0] = gid < GTM ? *(const u32*)(qb + (size_t)gid * LDM + c) : 0u;
      qa[ks][1] = gid + 8 < GTM ? *(const u32*)(qb + (size_t)(gid + 8) * LDM + c) : 0u;
      qa[ks][2] = gid < GTM ? *(const u32*)(qb + (size_t)gid * LDM + c + 8) : 0u;
      qa[ks][3] = gid + 8 < GTM ? *(const u32*)(qb + (size_t)(gid + 8) * LDM + c + 8) : 0u;
    }
  }
  float acc[LNT][4];
  #pragma unroll
  for (int n = 0; n < LNT; ++n) { acc[n][0] = 0.f; acc[n][1] = 0.f; acc[n][2] = 0.f; acc[n][3] = 0.f; }
  float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;
  u32 mism = 0u, first_bad = 0xffffffffu, reads = 0u;
  u64 cks = 0ull;

  for (int t = grp; t < ntiles; t += 2) {
    // The refill of this tile's stage (tile t + LNST): block ids now, the copies at the end.
    const u32 refill_blk = wg == 0 && !LAT_NOLOAD ? row_blk(t + LNST) : 0xffffffffu;
#ifndef LAT_DIAG_NOLOAD
    wait_tile(t);
#endif
    const int t0 = s_begin + t * LTT;
    const u16* kt = sm_kv + (t % LNST) * LTT * LROW;
    const u32 kt_s = smem_addr(kt);
    if (verifier && lane < 8) {
      const int r = wg * 8 + lane, pos = t0 + r;
      const u64 want = next_tag;
      next_tag = tag_at(t + 2);
      if (pos >= lo && pos < hi) {
        const u64 got = *(const u64*)(kt + r * LROW);
        reads += 1u; cks += got;
        if (got != want) { mism += 1u; first_bad = min(first_bad, (u32)pos); }
      }
    }
    // S partial over the warp's dims: 4 n-tiles of 8 positions.
    float sp[4][4];
    #pragma unroll
    for (int j = 0; j < 4; ++j) { sp[j][0] = 0.f; sp[j][1] = 0.f; sp[j][2] = 0.f; sp[j][3] = 0.f; }
    #pragma unroll
    for (int ks = 0; ks < LKS; ++ks) {
      #pragma unroll
      for (int jp = 0; jp < 2; ++jp) {
        const int tok = 16 * jp + ((lane >> 4) << 3) + (lane & 7);
        const int dim = d0 + 16 * ks + (((lane >> 3) & 1) << 3);
        u32 b0, b1, b2, b3;
        ldsm4(kt_s + (u32)(tok * LROW + dim) * 2u, b0, b1, b2, b3);
        LAT_MMA(sp[2 * jp], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], b0, b1);
        LAT_MMA(sp[2 * jp + 1], qa[ks][0], qa[ks][1], qa[ks][2], qa[ks][3], b2, b3);
      }
    }
    float* red = sm_red + wg * 16 * LRED;
    #pragma unroll
    for (int j = 0; j < 4; ++j) {
      *(float2*)(red + gid * LRED + 8 * j + 2 * tid) = make_float2(sp[j][0], sp[j][1]);
      *(float2*)(red + (gid + 8) * LRED + 8 * j + 2 * tid) = make_float2(sp[j][2], sp[j][3]);
    }
    group_sync(grp);
    // Warp w finishes positions 8w .. 8w+7: sum the partials, scale, mask, row max.
    float s00 = 0.f, s01 = 0.f, s10 = 0.f, s11 = 0.f;
    #pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 a = *(const float2*)(sm_red + (w * 16 + gid) * LRED + 8 * wg + 2 * tid);
      const float2 b = *(const float2*)(sm_red + (w * 16 + gid + 8) * LRED + 8 * wg + 2 * tid);
      s00 += a.x; s01 += a.y; s10 += b.x; s11 += b.y;
    }
    const int pa = t0 + 8 * wg + 2 * tid;
    const bool ok0 = pa >= lo && pa < hi, ok1 = pa + 1 >= lo && pa + 1 < hi;
    s00 = ok0 ? s00 * scale_log2 : NEG_INF; s10 = ok0 ? s10 * scale_log2 : NEG_INF;
    s01 = ok1 ? s01 * scale_log2 : NEG_INF; s11 = ok1 ? s11 * scale_log2 : NEG_INF;
    float x0 = fmaxf(s00, s01), x1 = fmaxf(s10, s11);
    x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1)); x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
    x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1)); x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
    if (tid == 0) { sm_mx[wg * 16 + gid] = x0; sm_mx[wg * 16 + gid + 8] = x1; }
    group_sync(grp);
    float n0 = m0, n1 = m1;
    #pragma unroll
    for (int w = 0; w < 4; ++w) { n0 = fmaxf(n0, sm_mx[w * 16 + gid]); n1 = fmaxf(n1, sm_mx[w * 16 + gid + 8]); }
    const float mu0 = n0 == NEG_INF ? 0.f : n0, mu1 = n1 == NEG_INF ? 0.f : n1;
    const float al0 = ex2(m0 - mu0), al1 = ex2(m1 - mu1);
    m0 = n0; m1 = n1;
    const float p00 = ex2(s00 - mu0), p01 = ex2(s01 - mu0), p10 = ex2(s10 - mu1), p11 = ex2(s11 - mu1);
    l0 = l0 * al0 + p00 + p01;
    l1 = l1 * al1 + p10 + p11;
    *(u32*)(sm_p + gid * LPS + 8 * wg + 2 * tid) = pack_bf16(p00, p01);
    *(u32*)(sm_p + (gid + 8) * LPS + 8 * wg + 2 * tid) = pack_bf16(p10, p11);
    #pragma unroll
    for (int n = 0; n < LNT; ++n) { acc[n][0] *= al0; acc[n][1] *= al0; acc[n][2] *= al1; acc[n][3] *= al1; }
    group_sync(grp);
    // O += P V over the warp's dims: 2 k-steps of 16 positions, LNT n-tiles of 8 dims.
    const u32 p_s = smem_addr(sm_p);
    #pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      u32 a0, a1, a2, a3;
      ldsm4(p_s + (u32)(((lane & 7) + (((lane >> 3) & 1) << 3)) * LPS + 16 * kk + ((lane >> 4) << 3)) * 2u, a0, a1, a2, a3);
      const int tok = 16 * kk + (((lane >> 3) & 1) << 3) + (lane & 7);
      #pragma unroll
      for (int np = 0; np < LNT / 2; ++np) {
        const int dim = d0 + 16 * np + ((lane >> 4) << 3);
        u32 b0, b1, b2, b3;
        ldsm4t(kt_s + (u32)(tok * LROW + dim) * 2u, b0, b1, b2, b3);
        LAT_MMA(acc[2 * np], a0, a1, a2, a3, b0, b1);
        LAT_MMA(acc[2 * np + 1], a0, a1, a2, a3, b2, b3);
      }
    }
    group_sync(grp);  // the group is done with the stage, P and the partial scores
    if (wg == 0 && !LAT_NOLOAD && t + LNST < ntiles) issue(t + LNST, refill_blk);
  }
  // Row sums: over the lane quad, then over the group's warps (they used the same maxima).
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1); l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1); l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (tid == 0) { sm_l[grp * 64 + wg * 16 + gid] = l0; sm_l[grp * 64 + wg * 16 + gid + 8] = l1; }
  __syncthreads();  // both groups are done with every stage; the row sums are in
  float L0 = 0.f, L1 = 0.f;
  #pragma unroll
  for (int w = 0; w < 4; ++w) { L0 += sm_l[grp * 64 + w * 16 + gid]; L1 += sm_l[grp * 64 + w * 16 + gid + 8]; }
  // Merge: group 1 leaves (M, L, O) in shared memory (the stages are free now), group 0 adds it.
  float* sm_o = (float*)sm_kv;  // [16][LDM]
  if (grp == 1) {
    #pragma unroll
    for (int n = 0; n < LNT; ++n) {
      const int d = d0 + 8 * n + 2 * tid;
      *(float2*)(sm_o + gid * LDM + d) = make_float2(acc[n][0], acc[n][1]);
      *(float2*)(sm_o + (gid + 8) * LDM + d) = make_float2(acc[n][2], acc[n][3]);
    }
    if (wg == 0 && tid == 0) {
      sm_ml[gid * 2] = m0; sm_ml[gid * 2 + 1] = L0;
      sm_ml[(gid + 8) * 2] = m1; sm_ml[(gid + 8) * 2 + 1] = L1;
    }
  }
  __syncthreads();
  if (grp == 0) {
    #pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = gid + 8 * hr;
      const float Ma = hr ? m1 : m0, La = hr ? L1 : L0;
      const float Mb = sm_ml[r * 2], Lb = sm_ml[r * 2 + 1];
      const float M = fmaxf(Ma, Mb);
      const float fa = Ma == NEG_INF ? 0.f : ex2(Ma - M), fb = Mb == NEG_INF ? 0.f : ex2(Mb - M);
      const float L = La * fa + Lb * fb;
      const float inv = L > 0.f ? 1.f / L : 0.f;
      if (r < GTM) {
        const size_t orow = orow0 + r;
        #pragma unroll
        for (int n = 0; n < LNT; ++n) {
          const int d = d0 + 8 * n + 2 * tid;
          const float2 b = *(const float2*)(sm_o + r * LDM + d);
          const float o0 = acc[n][2 * hr] * fa + b.x * fb, o1 = acc[n][2 * hr + 1] * fa + b.y * fb;
          if (nsplit == 1) {
            *(float2*)(out + orow * LDM + d) = make_float2(o0 * inv, o1 * inv);
          } else {
            *(float2*)(part_o + (orow * nsplit + split) * LDM + d) = make_float2(o0, o1);
          }
        }
        if (nsplit > 1 && wg == 0 && tid == 0) {
          part_ml[(orow * nsplit + split) * 2] = M;
          part_ml[(orow * nsplit + split) * 2 + 1] = L;
        }
      }
    }
  }
  if (verifier) flush_record(verify + (size_t)seq * 8, mism, first_bad, reads, cks);
}

// grid (ceil(rows * LDM / 4 / 128)), 128 threads: one float4 of output per thread,
// out = sum_s O_s 2^(M_s - M) / sum_s L_s 2^(M_s - M) over the nsplit partial rows. A separate
// launch spreads the combine over the whole device (done by the last CTA of each row block, the
// 16 x 576 partial rows took tens of microseconds at the end of the decode).
extern "C" __global__ void __launch_bounds__(128) latent_combine(const float* __restrict__ part_o,
    const float* __restrict__ part_ml, float* __restrict__ out, int rows, int nsplit) {
  const int nv = LDM / 4;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifdef LAT_DIAG_NOCOMBINE
  return;  // diagnostic: the launch without its work
#endif
  if (i >= rows * nv) return;
  const int r = i / nv, d = (i - r * nv) * 4;
  const float* ml = part_ml + (size_t)r * nsplit * 2;
  float M = NEG_INF;
  for (int s = 0; s < nsplit; ++s) M = fmaxf(M, ml[2 * s]);
  float L = 0.f;
  float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
  #pragma unroll 8
  for (int s = 0; s < nsplit; ++s) {
    const float m = ml[2 * s];
    const float f = m == NEG_INF ? 0.f : ex2(m - M);
    L += ml[2 * s + 1] * f;
    const float4 p = *(const float4*)(part_o + ((size_t)r * nsplit + s) * LDM + d);
    o.x += p.x * f; o.y += p.y * f; o.z += p.z * f; o.w += p.w * f;
  }
  const float inv = L > 0.f ? 1.f / L : 0.f;
  *(float4*)(out + (size_t)r * LDM + d) = make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
}
#endif
