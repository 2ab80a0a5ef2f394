// ---------------------------------------------------------------- MLA latent decode (tensor cores)
// grid (nsplit * head_tiles, seqs, layers), 320 threads, dynamic shared memory (latent_mma_smem).
// Two consumer groups of four warps take alternate 32-position tiles (group g: tiles g, g + 2,
// ...), each with its own softmax state, so that one group's MMAs overlap the other's barriers
// and reductions; they merge at the end. Stage s of the LNST shared-memory stages belongs to
// group s % 2 (hence LNST even), and each group has a producer warp (warps 8 and 9): it looks
// the block ids up a round of stages ahead and fills the group's stages with Hopper bulk copies
// (cp.async.bulk) that complete on the stage's `full` mbarrier, once the group has released the
// stage on its `empty` mbarrier. Inside a group, warp w owns latent dims [w*LMW, (w+1)*LMW):
// it multiplies its slice of the tile with its Q slice (S partial, mma.sync m16n8k16, heads as
// the 16 rows), the four partials are summed in shared memory, each warp turns 8 positions into
// P, and every warp multiplies P (16 x 32) by its V slice (V = K = the latent, read transposed
// with ldmatrix.trans). With nsplit > 1 the last CTA of a request's splits combines their
// partial rows.
#ifdef LDM
#define LMW (LDM / 4)
#define LKS (LMW / 16)
#define LNT (LMW / 8)
#define LNCH (LDM / 8)
#define LTT 32
#define LROW (LDM + MLA_ROW_PAD)
#define LRED 40
#define LPS 40
#define LCONS 256                // consumer threads: two groups of four warps
#define LTHREADS (LCONS + 64)    // and the two producer warps
#define LCPT ((16 * (LDM / 4) + LCONS - 1) / LCONS)  // float4 of the split combine per thread
// Lazy rescaling: a group keeps its running row maxima while no score of a tile exceeds them
// by more than LTAU (log2 units), so P <= 2^LTAU (exact in bf16's exponent range, f32 sums) and
// the accumulators are rescaled only when a maximum really moves (the first tile, in practice).
#ifndef LTAU
#define LTAU 8.f
#endif
// Diagnostic builds (timing only, results are wrong): LAT_DIAG_NOMMA drops the MMAs,
// LAT_DIAG_NOLOAD the tile copies and waits, LAT_DIAG_NOCOMBINE the split combine's work,
// LAT_DIAG_EMPTY everything (the launch alone). (Dropping the merge and output instead lets
// the compiler drop the MMAs too: no such build.)
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
// LAT_DIAG_TIMELINE (timing diagnostics, results stay right): thread 0 of every CTA stamps
// lat_timeline[cta][8] (bandwidth::timeline_summary reads them): globaltimer at entry, SM id
// (bit 32: it ran the split combine), clock64 at entry, first tile, loop end, before the split
// counter and exit, globaltimer at exit.
#ifdef LAT_DIAG_TIMELINE
__device__ u64 lat_timeline[8 * 4096];
__device__ __forceinline__ u64 lat_gtimer() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
__device__ __forceinline__ u64 lat_smid() { u32 s; asm volatile("mov.u32 %0, %%smid;" : "=r"(s)); return s; }
#define LAT_CTA ((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x)
#define LAT_STAMP(k, v) do { if (threadIdx.x == 0 && LAT_CTA < 4096) lat_timeline[LAT_CTA * 8 + (k)] = (v); } while (0)
#define LAT_EXIT(last) do { LAT_STAMP(6, (u64)clock64()); LAT_STAMP(7, lat_gtimer()); \
  if (last) LAT_STAMP(1, lat_smid() | (1ull << 32)); } while (0)
#else
#define LAT_STAMP(k, v) ((void)0)
#define LAT_EXIT(last) ((void)0)
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
// Barrier of one group's 128 threads (ids 1 and 2), and of the 256 consumers (id 3); the
// producer warps leave early, so nothing after the start uses __syncthreads.
__device__ __forceinline__ void group_sync(int grp) {
  asm volatile("bar.sync %0, 128;" :: "r"(grp + 1) : "memory");
}
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 3, %0;" :: "n"(LCONS) : "memory");
}
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  asm volatile("{\n\t.reg .pred p;\n\tWAIT_%=:\n\t"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
               "@!p bra WAIT_%=;\n\t}" :: "r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}

extern "C" __global__ void __launch_bounds__(LTHREADS, 1) attn_latent_mma(DECODE_PARAMS) {
  extern __shared__ __align__(16) unsigned char sm_raw[];
#ifdef LAT_DIAG_EMPTY
  return;  // diagnostic: the launch alone
#endif
  LAT_STAMP(0, lat_gtimer());
  LAT_STAMP(1, lat_smid());
  LAT_STAMP(2, (u64)clock64());
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tid = lane & 3;
  const int grp = warp >> 2, wg = warp & 3;  // grp 2: the producer warps, for groups wg = 0, 1
  // Shared memory, in order (lower::latent_mma_smem mirrors it); per-group parts are [2][...].
  // The stages start on a 128-byte boundary (the allocation has 128 bytes to spare). Bulk copies
  // land where the static shared memory ends otherwise: 48 bytes in made the whole decode 20-25%
  // slower than 32 bytes in, and the 128-byte boundary is 2-4% faster than 32 bytes in.
  u16* sm_kv = (u16*)(sm_raw + ((0u - smem_addr(sm_raw)) & 127u));  // [LNST][LTT][LROW]
  float* red_all = (float*)(sm_kv + LNST * LTT * LROW);             // [2][4][16][LRED]
  u16* p_all = (u16*)(red_all + 2 * 4 * 16 * LRED);                 // [2][16][LPS]
  float* mx_all = (float*)(p_all + 2 * 16 * LPS);                   // [2][4][16]
  float* sm_l = mx_all + 2 * 64;                                    // [2][4][16]
  float* sm_ml = sm_l + 2 * 64;                                     // [16][2]: group 1's (M, L)
  u32* sm_flag = (u32*)(sm_ml + 32);                                // [2][4]: a warp's maxima grew
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
  const u64* tags = expected + (size_t)seq * exp_stride;
  const int qh0 = ht * GTM;
  const int d0 = wg * LMW;
  const size_t orow0 = ((size_t)seq * layers + layer) * G + qh0;

  __shared__ __align__(8) u64 sm_full[LNST], sm_empty[LNST];
  if (threadIdx.x == 0) {
    #pragma unroll
    for (int s = 0; s < LNST; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&sm_full[s])) : "memory");
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 4;" :: "r"(smem_addr(&sm_empty[s])) : "memory");
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  // Loads. Rows come in runs of `run` positions (the largest power of two dividing the block
  // size, at most a tile), contiguous and padded alike in the pool and in shared memory, so one
  // bulk copy per run (lane r copies the run starting at row r) fills a stage. Runs starting at
  // or after hi are zeroed with plain stores instead. (One bulk copy per row, and 16-byte
  // cp.async per thread before that, ran at 11-58% of the copy bandwidth: the per-request cost
  // of small copies, not the bytes, was the limit.)
  const size_t block_elems = (size_t)layers * bs * LROW;
  const size_t layer_off = (size_t)layer * bs * LROW;
  const u32* tbl = tables + (size_t)seq * table_stride;
  const int run = min(LTT, bs & -bs);
  const u32 run_bytes = (u32)(run * LROW * 2);
  // The block id of the run lane starts in tile T (lanes that start no run: none).
  auto row_blk = [&](int T) -> u32 {
    const int pos = s_begin + T * LTT + lane;
    return (T < ntiles && lane % run == 0 && pos < hi) ? __ldg(tbl + pos / bs) : 0xffffffffu;
  };
  // One whole warp fills the stage of tile T (free by now) and arms its `full` barrier.
  auto issue = [&](int T, u32 blk) {
    const int s = T % LNST;
    const u32 bar = smem_addr(&sm_full[s]);
    const int t0 = s_begin + T * LTT;
    u16* dst = sm_kv + s * LTT * LROW + lane * LROW;
    if (t0 + lane - lane % run >= hi) {
      #pragma unroll 8
      for (int i = 0; i < LNCH; ++i) ((uint4*)dst)[i] = make_uint4(0u, 0u, 0u, 0u);
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncwarp();  // the zeroed rows precede lane 0's arrive (a release) below
    const bool lead = blk != 0xffffffffu;
    const u32 copies = (u32)__popc(__ballot_sync(0xffffffffu, lead));
    if (lane == 0)
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(copies * run_bytes) : "memory");
    if (lead) {
      const u16* src = pool + (size_t)blk * block_elems + layer_off + (size_t)((t0 + lane) % bs) * LROW;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   :: "r"(smem_addr(dst)), "l"(src), "r"(run_bytes), "r"(bar) : "memory");
    }
  };
  if (grp == 2) {
    // The producer of group wg's stages (wg, wg + 2, ...): the block ids of a round of tiles
    // are loaded together, before the round waits for its stages to be released.
    if (LAT_NOLOAD) return;
    u32 pb[LNST / 2];
    for (int T0 = 0; T0 < ntiles; T0 += LNST) {
      #pragma unroll
      for (int i = 0; i < LNST / 2; ++i) pb[i] = row_blk(T0 + 2 * i + wg);
      #pragma unroll
      for (int i = 0; i < LNST / 2; ++i) {
        const int s = 2 * i + wg, T = T0 + s;
        if (T >= ntiles) break;
        if (T0 > 0) mbar_wait(smem_addr(&sm_empty[s]), (u32)((T0 / LNST - 1) & 1));
        issue(T, pb[i]);
      }
    }
    return;
  }

  float* sm_red = red_all + grp * (4 * 16 * LRED);
  u16* sm_p = p_all + grp * (16 * LPS);
  float* sm_mx = mx_all + grp * 64;
  // The warp's Q slice as A fragments (rows >= GTM are zero), loaded first.
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
  // The verifier's expected tags (lanes 0-7 of each warp: rows 8 wg + lane), fetched a tile
  // ahead with cp.async into two slots per warp. (Carried in a register, the tag of the next
  // tile made the compiler wait for its load at the end of every tile: 10% of the samples.)
  __shared__ u64 sm_tag[8][2][8];  // [warp][slot][lane]
  auto tag_fetch = [&](int T, int slot) {
    const int pos = s_begin + T * LTT + wg * 8 + lane;
    if (T < ntiles && pos >= lo && pos < hi)
      asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" :: "r"(smem_addr(&sm_tag[warp][slot][lane])), "l"(tags + pos) : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  int slot = 0;
  if (verifier && lane < 8) tag_fetch(grp, 0);
  float acc[LNT][4];
  #pragma unroll
  for (int n = 0; n < LNT; ++n) { acc[n][0] = 0.f; acc[n][1] = 0.f; acc[n][2] = 0.f; acc[n][3] = 0.f; }
  float m0 = NEG_INF, m1 = NEG_INF, l0 = 0.f, l1 = 0.f;
  u32 mism = 0u, first_bad = 0xffffffffu, reads = 0u;
  u64 cks = 0ull;

  for (int t = grp; t < ntiles; t += 2) {
#ifndef LAT_DIAG_NOLOAD
    mbar_wait(smem_addr(&sm_full[t % LNST]), (u32)((t / LNST) & 1));
#endif
    if (t == 0) LAT_STAMP(3, (u64)clock64());
    const int t0 = s_begin + t * LTT;
    const u16* kt = sm_kv + (t % LNST) * LTT * LROW;
    const u32 kt_s = smem_addr(kt);
    if (verifier && lane < 8) {
      const int r = wg * 8 + lane, pos = t0 + r;
      asm volatile("cp.async.wait_all;" ::: "memory");
      const u64 want = sm_tag[warp][slot][lane];
      tag_fetch(t + 2, slot ^ 1);
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
    // P with the group's running maxima (m0, m1 are the same in every warp of the group),
    // unless some warp saw a score above them by more than LTAU: then, after the barrier, the
    // whole group takes the new maxima, rescales and rewrites P.
    const u32 grew = __any_sync(0xffffffffu, x0 > m0 + LTAU || x1 > m1 + LTAU);
    if (tid == 0) { sm_mx[wg * 16 + gid] = x0; sm_mx[wg * 16 + gid + 8] = x1; }
    if (lane == 0) sm_flag[grp * 4 + wg] = grew;
    float mu0 = m0 == NEG_INF ? 0.f : m0, mu1 = m1 == NEG_INF ? 0.f : m1;
    float p00 = ex2(s00 - mu0), p01 = ex2(s01 - mu0), p10 = ex2(s10 - mu1), p11 = ex2(s11 - mu1);
    *(u32*)(sm_p + gid * LPS + 8 * wg + 2 * tid) = pack_bf16(p00, p01);
    *(u32*)(sm_p + (gid + 8) * LPS + 8 * wg + 2 * tid) = pack_bf16(p10, p11);
    group_sync(grp);
    const uint4 fl = *(const uint4*)(sm_flag + grp * 4);
    if (fl.x | fl.y | fl.z | fl.w) {
      float n0 = m0, n1 = m1;
      #pragma unroll
      for (int w = 0; w < 4; ++w) { n0 = fmaxf(n0, sm_mx[w * 16 + gid]); n1 = fmaxf(n1, sm_mx[w * 16 + gid + 8]); }
      const float nu0 = n0 == NEG_INF ? 0.f : n0, nu1 = n1 == NEG_INF ? 0.f : n1;
      const float al0 = ex2(m0 - nu0), al1 = ex2(m1 - nu1);
      m0 = n0; m1 = n1; mu0 = nu0; mu1 = nu1;
      l0 *= al0; l1 *= al1;
      #pragma unroll
      for (int n = 0; n < LNT; ++n) { acc[n][0] *= al0; acc[n][1] *= al0; acc[n][2] *= al1; acc[n][3] *= al1; }
      p00 = ex2(s00 - mu0); p01 = ex2(s01 - mu0); p10 = ex2(s10 - mu1); p11 = ex2(s11 - mu1);
      *(u32*)(sm_p + gid * LPS + 8 * wg + 2 * tid) = pack_bf16(p00, p01);
      *(u32*)(sm_p + (gid + 8) * LPS + 8 * wg + 2 * tid) = pack_bf16(p10, p11);
      group_sync(grp);
    }
    l0 += p00 + p01;
    l1 += p10 + p11;
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
    __syncwarp();
    if (lane == 0) mbar_arrive(smem_addr(&sm_empty[t % LNST]));  // this warp is done with the stage
    slot ^= 1;
  }
  LAT_STAMP(4, (u64)clock64());
  // Row sums: over the lane quad, then over the group's warps (they used the same maxima).
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1); l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1); l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (tid == 0) { sm_l[grp * 64 + wg * 16 + gid] = l0; sm_l[grp * 64 + wg * 16 + gid + 8] = l1; }
  consumers_sync();  // both groups are done with every stage; the row sums are in
  float L0 = 0.f, L1 = 0.f;
  #pragma unroll
  for (int w = 0; w < 4; ++w) { L0 += sm_l[grp * 64 + w * 16 + gid]; L1 += sm_l[grp * 64 + w * 16 + gid + 8]; }
  // Merge: group 1 leaves (M, L, O) in shared memory (the stages are free now), group 0 adds it.
  // Rows padded by 8 floats: with LDM floats (a multiple of 32 banks) the 8 rows of a warp's
  // float2 stores and loads fell on the same banks.
  float* sm_o = (float*)sm_kv;  // [16][LDM + 8]
  if (grp == 1) {
    #pragma unroll
    for (int n = 0; n < LNT; ++n) {
      const int d = d0 + 8 * n + 2 * tid;
      *(float2*)(sm_o + gid * (LDM + 8) + d) = make_float2(acc[n][0], acc[n][1]);
      *(float2*)(sm_o + (gid + 8) * (LDM + 8) + d) = make_float2(acc[n][2], acc[n][3]);
    }
    if (wg == 0 && tid == 0) {
      sm_ml[gid * 2] = m0; sm_ml[gid * 2 + 1] = L0;
      sm_ml[(gid + 8) * 2] = m1; sm_ml[(gid + 8) * 2 + 1] = L1;
    }
  }
  consumers_sync();
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
          const float2 b = *(const float2*)(sm_o + r * (LDM + 8) + d);
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
  LAT_STAMP(5, (u64)clock64());
  if (nsplit == 1) { LAT_EXIT(false); return; }
  // The split combine, by the last CTA of the request's splits to finish (a counter, reset by
  // that CTA for the next launch): out = sum_s O_s 2^(M_s - M) / sum_s L_s 2^(M_s - M). Every
  // thread keeps LCPT float4 of output and streams the partial rows through them two splits
  // at a time; the first two are in flight while the (M, L) pairs become per-split factors in
  // shared memory. At 32 x 4K its work costs about 3 us of a 51 us decode (LAT_DIAG_NOCOMBINE);
  // the separate combine launch it replaced cost 1-2 us more.
  u32* counter = counters + ((size_t)blockIdx.y * gridDim.z + blockIdx.z) * head_tiles + ht;
  if (!last_split_cta(counter, nsplit, [] { consumers_sync(); })) { LAT_EXIT(false); return; }
#ifdef LAT_DIAG_NOCOMBINE
  return;  // diagnostic: the decode without the combine's work
#endif
  const int nv = LDM / 4;
  const float4* po = (const float4*)(part_o + orow0 * nsplit * LDM);
  // Partial row (r, s) starts at float4 (r * nsplit + s) * nv of po.
  auto load2 = [&](int s, float4 (&v)[2][LCPT]) {
    #pragma unroll
    for (int i = 0; i < LCPT; ++i) {
      const int idx = threadIdx.x + i * LCONS;
      const int r = idx / nv, d4 = idx - r * nv;
      #pragma unroll
      for (int k = 0; k < 2; ++k)
        v[k][i] = idx < GTM * nv && s + k < nsplit ? __ldcg(po + (size_t)(r * nsplit + s + k) * nv + d4)
                                                  : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  float4 v[2][LCPT];
  load2(0, v);
  float2* sm_pair = (float2*)sm_kv;            // [GTM][nsplit] (M, L)
  float* sm_f = (float*)(sm_pair + GTM * nsplit);  // [GTM][nsplit] factors
  float* sm_inv = sm_f + GTM * nsplit;          // [GTM] 1 / L
  for (int i = threadIdx.x; i < GTM * nsplit; i += LCONS) sm_pair[i] = __ldcg((const float2*)(part_ml + orow0 * nsplit * 2) + i);
  consumers_sync();
  if (threadIdx.x < GTM) {
    const float2* ml = sm_pair + threadIdx.x * nsplit;
    float M = NEG_INF;
    for (int s = 0; s < nsplit; ++s) M = fmaxf(M, ml[s].x);
    float L = 0.f;
    for (int s = 0; s < nsplit; ++s) {
      const float f = ml[s].x == NEG_INF ? 0.f : ex2(ml[s].x - M);
      L += ml[s].y * f;
      sm_f[threadIdx.x * nsplit + s] = f;
    }
    sm_inv[threadIdx.x] = L > 0.f ? 1.f / L : 0.f;
  }
  consumers_sync();
  float4 o[LCPT];
  #pragma unroll
  for (int i = 0; i < LCPT; ++i) o[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int s = 0; s < nsplit; s += 2) {
    #pragma unroll
    for (int i = 0; i < LCPT; ++i) {
      const int r = min((int)(threadIdx.x + i * LCONS) / nv, GTM - 1);
      #pragma unroll
      for (int k = 0; k < 2; ++k) {
        const float f = s + k < nsplit ? sm_f[r * nsplit + s + k] : 0.f;
        o[i].x += v[k][i].x * f; o[i].y += v[k][i].y * f; o[i].z += v[k][i].z * f; o[i].w += v[k][i].w * f;
      }
    }
    if (s + 2 < nsplit) load2(s + 2, v);
  }
  #pragma unroll
  for (int i = 0; i < LCPT; ++i) {
    const int idx = threadIdx.x + i * LCONS;
    if (idx < GTM * nv) {
      const int r = idx / nv, d4 = idx - r * nv;
      const float inv = sm_inv[r];
      ((float4*)(out + (orow0 + r) * LDM))[d4] = make_float4(o[i].x * inv, o[i].y * inv, o[i].z * inv, o[i].w * inv);
    }
  }
  LAT_EXIT(true);
}
#endif
