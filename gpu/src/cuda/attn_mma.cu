// ---------------------------------------------------------------- tensor-core paged decode
// grid (nsplit * head_tiles, seqs, layers * kv_heads), 128 threads. Each warp walks 32-position
// tiles; S^T = Q K^T and O = P V with mma.sync m16n8k16 (heads padded to 16 rows; with at most 8
// heads per CTA the upper 8 rows are dropped). Positions and dims are permuted consistently so
// that every operand comes straight from 16-byte loads: K rows (row-major) as B of S^T, V columns
// (transposed layout) as B of O. Loads of the next tile are issued as soon as the current tile's
// registers are consumed (K after S^T, V after O), so each warp keeps a tile in flight
// K/V loads skip L1 and ask L2 for 256-byte fetches (`KV_PLAIN`: plain `__ldg`); `V_LATE` loads V
// just before O instead of a tile ahead.
#ifdef HD
#define KPAIRS (HD / 32)
#define NDT (HD / 8)
#define NWARPS 4
#if HT > 8
#define TWO_ROWS 1
#else
#define TWO_ROWS 0
#endif
#ifndef KV_PLAIN
#define LDKV(p) ldg_l2_256(p)
__device__ __forceinline__ uint4 ldg_l2_256(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
}
#else
#define LDKV(p) __ldg(p)
#endif
// With at most 8 heads per CTA, A rows gid+8 are zero; the MMA still takes and returns all four
// accumulators (a C operand that is not one register quad costs copies and spills).
#define MMA_ROWS(c, a0, a1, a2, a3, b0, b1) mma16816(c, a0, a1, a2, a3, b0, b1)

extern "C" __global__ void __launch_bounds__(128, 2) attn_mma(DECODE_PARAMS) {
  __shared__ float sm_o[NWARPS][HT][HD];
  __shared__ float sm_ml[NWARPS][16][2];
  const int head_tiles = G / HT;
  const int split = blockIdx.x / head_tiles;
  const int ht = blockIdx.x - split * head_tiles;
  KV_DECODE_CTA(HD);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tid = lane & 3;
  const bool verifier = ht == 0;
  const int qh0 = kvh * G + ht * HT;
  // The lane's K rows: positions kc + 4s + 2h + gid%2 of the 8-position chunk kc (one block);
  // its V chunk: positions t0 + tid*8 .. +8 (one block).
  const int kc_off = (gid >> 1) * 8, vc_off = tid * 8;

  uint4 kr[4][KPAIRS];
  uint4 vr[NDT];
#define LOAD_K(T0)                                                                              \
  {                                                                                            \
    const int kc = (T0) + kc_off;                                                              \
    const u32 blk = kc < hi ? __ldg(tbl + kc / bs) : 0u;                                       \
    const u16* kb = pool + (size_t)blk * block_elems + k_off + (size_t)(kc % bs + (gid & 1)) * HD; \
    _Pragma("unroll") for (int tile = 0; tile < 4; ++tile) {                                   \
      const uint4* row = (const uint4*)(kb + (size_t)(4 * (tile >> 1) + 2 * (tile & 1)) * HD);   \
      _Pragma("unroll") for (int j = 0; j < KPAIRS; ++j) kr[tile][j] = LDKV(row + 4 * j + tid); \
    }                                                                                          \
  }
#define LOAD_V(T0)                                                                              \
  {                                                                                            \
    const int vc = (T0) + vc_off;                                                              \
    const u32 blk = vc < hi ? __ldg(tbl + vc / bs) : 0u;                                       \
    const u16* vb = pool + (size_t)blk * block_elems + v_off + (vc % bs);                      \
    _Pragma("unroll") for (int nt = 0; nt < NDT; ++nt)                                         \
      vr[nt] = LDKV((const uint4*)(vb + (size_t)(nt * 8 + gid) * bs));                          \
  }
  int t0 = s_begin + warp * 32;
#ifdef V_LATE
  if (t0 < s_end) { LOAD_K(t0); }
#else
  if (t0 < s_end) { LOAD_K(t0); LOAD_V(t0); }
#endif

  // Q fragments live in shared memory (registers go to loads in flight): sm_qa[j][lane] holds
  // the lane's 8 dims 32j + tid*8 .. of head row gid, sm_qb of head row gid + 8.
  __shared__ uint4 sm_qa[KPAIRS][32];
#if TWO_ROWS
  __shared__ uint4 sm_qb[KPAIRS][32];
#endif
  if (warp == 0) {
    const u16* qrow = q + (((size_t)seq * layers + layer) * q_heads + qh0) * HD;
    #pragma unroll
    for (int j = 0; j < KPAIRS; ++j) {
      uint4 a = make_uint4(0u, 0u, 0u, 0u);
      if (gid < HT) a = *(const uint4*)(qrow + (size_t)gid * HD + 32 * j + tid * 8);
      sm_qa[j][lane] = a;
#if TWO_ROWS
      uint4 b = make_uint4(0u, 0u, 0u, 0u);
      if (gid + 8 < HT) b = *(const uint4*)(qrow + (size_t)(gid + 8) * HD + 32 * j + tid * 8);
      sm_qb[j][lane] = b;
#endif
    }
  }
  __syncthreads();
  float m0 = NEG_INF, l0 = 0.f;
#if TWO_ROWS
  float m1 = NEG_INF, l1 = 0.f;
#endif
  float acc[NDT][4];
  #pragma unroll
  for (int nt = 0; nt < NDT; ++nt) { acc[nt][0] = 0.f; acc[nt][1] = 0.f; acc[nt][2] = 0.f; acc[nt][3] = 0.f; }
  u32 mism = 0u, first_bad = 0xffffffffu, reads = 0u;
  u64 cks = 0ull;

  for (; t0 < s_end; t0 += NWARPS * 32) {
    const int tn = t0 + NWARPS * 32;
    float sc[4][4];
    #pragma unroll
    for (int tile = 0; tile < 4; ++tile) { sc[tile][0] = 0.f; sc[tile][1] = 0.f; sc[tile][2] = 0.f; sc[tile][3] = 0.f; }
    #pragma unroll
    for (int j = 0; j < KPAIRS; ++j) {
      const uint4 a = sm_qa[j][lane];
#if TWO_ROWS
      const uint4 b = sm_qb[j][lane];
#else
      const uint4 b = make_uint4(0u, 0u, 0u, 0u);
#endif
      #pragma unroll
      for (int tile = 0; tile < 4; ++tile) {
        MMA_ROWS(sc[tile], a.x, b.x, a.y, b.y, kr[tile][j].x, kr[tile][j].y);
        MMA_ROWS(sc[tile], a.z, b.z, a.w, b.w, kr[tile][j].z, kr[tile][j].w);
      }
    }
    if (verifier && tid == 0) {
      #pragma unroll
      for (int tile = 0; tile < 4; ++tile) {
        const int pos = t0 + kc_off + 4 * (tile >> 1) + 2 * (tile & 1) + (gid & 1);
        if (pos >= lo && pos < hi) {
          const u64 got = ((u64)kr[tile][0].y << 32) | (u64)kr[tile][0].x;
          reads += 1u; cks += got;
          if (got != __ldg(tags + pos)) { mism += 1u; first_bad = min(first_bad, (u32)pos); }
        }
      }
    }
    if (tn < s_end) LOAD_K(tn);
    // Scores: the lane holds heads gid (and gid+8) at positions t0 + tid*8 + 4s + 2h + e.
    float mx0 = NEG_INF;
#if TWO_ROWS
    float mx1 = NEG_INF;
#endif
    #pragma unroll
    for (int tile = 0; tile < 4; ++tile) {
      #pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int pos = t0 + vc_off + 4 * (tile >> 1) + 2 * (tile & 1) + e;
        const bool ok = pos >= lo && pos < hi;
        sc[tile][e] = ok ? sc[tile][e] * scale_log2 : NEG_INF;
        mx0 = fmaxf(mx0, sc[tile][e]);
#if TWO_ROWS
        sc[tile][2 + e] = ok ? sc[tile][2 + e] * scale_log2 : NEG_INF;
        mx1 = fmaxf(mx1, sc[tile][2 + e]);
#endif
      }
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1)); mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    const float mn0 = fmaxf(m0, mx0);
    const float mu0 = mn0 == NEG_INF ? 0.f : mn0;
    const float al0 = ex2(m0 - mu0);
    m0 = mn0;
#if TWO_ROWS
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1)); mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn1 = fmaxf(m1, mx1);
    const float mu1 = mn1 == NEG_INF ? 0.f : mn1;
    const float al1 = ex2(m1 - mu1);
    m1 = mn1;
    float ps1 = 0.f;
#endif
    float ps0 = 0.f;
    #pragma unroll
    for (int tile = 0; tile < 4; ++tile) {
      #pragma unroll
      for (int e = 0; e < 2; ++e) {
        sc[tile][e] = ex2(sc[tile][e] - mu0); ps0 += sc[tile][e];
#if TWO_ROWS
        sc[tile][2 + e] = ex2(sc[tile][2 + e] - mu1); ps1 += sc[tile][2 + e];
#else
        sc[tile][2 + e] = 0.f;
#endif
      }
    }
    l0 = l0 * al0 + ps0;
#if TWO_ROWS
    l1 = l1 * al1 + ps1;
#endif
    #pragma unroll
    for (int nt = 0; nt < NDT; ++nt) {
      acc[nt][0] *= al0; acc[nt][1] *= al0;
#if TWO_ROWS
      acc[nt][2] *= al1; acc[nt][3] *= al1;
#endif
    }
#ifdef V_LATE
    LOAD_V(t0);
#endif
    u32 pa[2][4];
    #pragma unroll
    for (int s = 0; s < 2; ++s) {
      pa[s][0] = pack_bf16(sc[2 * s][0], sc[2 * s][1]);
      pa[s][1] = pack_bf16(sc[2 * s][2], sc[2 * s][3]);
      pa[s][2] = pack_bf16(sc[2 * s + 1][0], sc[2 * s + 1][1]);
      pa[s][3] = pack_bf16(sc[2 * s + 1][2], sc[2 * s + 1][3]);
    }
    #pragma unroll
    for (int nt = 0; nt < NDT; ++nt) {
      const uint4 w = vr[nt];
      MMA_ROWS(acc[nt], pa[0][0], pa[0][1], pa[0][2], pa[0][3], w.x, w.y);
      MMA_ROWS(acc[nt], pa[1][0], pa[1][1], pa[1][2], pa[1][3], w.z, w.w);
    }
    if (verifier && gid < 4) {
      const u32 ws[4] = {vr[0].x, vr[0].y, vr[0].z, vr[0].w};
      #pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int pos = t0 + vc_off + e;
        if (pos >= lo && pos < hi) {
          const u32 got = (ws[e >> 1] >> (16 * (e & 1))) & 0xffffu;
          const u32 want = (u32)(__ldg(tags + pos) >> (16 * gid)) & 0xffffu;
          cks += (u64)got << (16 * gid);
          if (got != want) { mism += 1u; first_bad = min(first_bad, (u32)pos); }
        }
      }
    }
#ifndef V_LATE
    if (tn < s_end) LOAD_V(tn);
#endif
  }
  // Combine the four warps in shared memory; write the output (one split) or a partial.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1); l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  if (tid == 0) { sm_ml[warp][gid][0] = m0; sm_ml[warp][gid][1] = l0; }
#if TWO_ROWS
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1); l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (tid == 0) { sm_ml[warp][gid + 8][0] = m1; sm_ml[warp][gid + 8][1] = l1; }
#endif
  #pragma unroll
  for (int nt = 0; nt < NDT; ++nt) {
    const int d = nt * 8 + tid * 2;
    if (gid < HT) { sm_o[warp][gid][d] = acc[nt][0]; sm_o[warp][gid][d + 1] = acc[nt][1]; }
#if TWO_ROWS
    if (gid + 8 < HT) { sm_o[warp][gid + 8][d] = acc[nt][2]; sm_o[warp][gid + 8][d + 1] = acc[nt][3]; }
#endif
  }
  __syncthreads();
  store_merged_rows<NWARPS>(&sm_o[0][0][0], &sm_ml[0][0][0], 16, HT, HD,
                            ((size_t)seq * layers + layer) * q_heads + qh0, nsplit, split, out, part_o, part_ml);
  if (verifier) flush_record(verify + (size_t)seq * 8, mism, first_bad, reads, cks);
  if (nsplit > 1)
    combine_if_last(part_o, part_ml, out, counters + ((size_t)blockIdx.y * gridDim.z + blockIdx.z) * head_tiles + ht,
                    nsplit, ((size_t)seq * layers + layer) * q_heads + qh0, HT, HD);
#undef LOAD_K
#undef LOAD_V
}
#endif

