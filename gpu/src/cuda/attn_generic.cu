// ---------------------------------------------------------------- generic paged decode (CUDA cores)
// For shapes the tensor-core kernel does not take (block sizes that are not a multiple of 8, head
// dims that are not a multiple of 32): same layout (K row-major, V transposed), same arguments,
// same verification records and split combine. grid (nsplit * G, seqs, layers * kv_heads), 128
// threads; one query head per CTA, a warp reads one position at a time, lane d holds dims
// d, d + 32, ... Correct, not tuned (meant for small test scenarios).
#ifdef GHD
#define GCPL ((GHD + 31) / 32)
#define GNWARPS 4
extern "C" __global__ void __launch_bounds__(128) attn_generic(DECODE_PARAMS) {
  __shared__ float sm_o[GNWARPS][GHD];
  __shared__ float sm_ml[GNWARPS][2];
  const int split = blockIdx.x / G;
  const int h = blockIdx.x - split * G;
  KV_DECODE_CTA(GHD);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool verifier = h == 0;
  const size_t orow = ((size_t)seq * layers + layer) * q_heads + kvh * G + h;
  const u16* qrow = q + orow * GHD;
  float qf[GCPL], acc[GCPL];
  #pragma unroll
  for (int c = 0; c < GCPL; ++c) {
    const int d = lane + 32 * c;
    qf[c] = d < GHD ? bf16f(qrow[d]) * scale_log2 : 0.f;
    acc[c] = 0.f;
  }
  float m = NEG_INF, l = 0.f;
  u32 mism = 0u, first_bad = 0xffffffffu, reads = 0u;
  u64 cks = 0ull;
  for (int p = max(s_begin, lo) + warp; p < s_end; p += GNWARPS) {
    const u32 blk = __ldg(tbl + p / bs);
    const int slot = p % bs;
    const u16* krow = pool + (size_t)blk * block_elems + k_off + (size_t)slot * GHD;
    const u16* vcol = pool + (size_t)blk * block_elems + v_off + slot;
    u32 kb[GCPL], vb[GCPL];
    float s = 0.f;
    #pragma unroll
    for (int c = 0; c < GCPL; ++c) {
      const int d = lane + 32 * c;
      kb[c] = d < GHD ? (u32)__ldg(krow + d) : 0u;
      vb[c] = d < GHD ? (u32)__ldg(vcol + (size_t)d * bs) : 0u;
      s += qf[c] * bf16f(kb[c]);
    }
    if (verifier) {
      u32 bad = 0u;
      if (lane < 4) {
        const u32 want = (u32)(__ldg(tags + p) >> (16 * lane)) & 0xffffu;
        bad = (kb[0] != want) || (vb[0] != want);
        cks += ((u64)kb[0] << (16 * lane)) + ((u64)vb[0] << (16 * lane));
      }
      const bool any_bad = __any_sync(0xffffffffu, bad != 0u);
      if (lane == 0) {
        reads += 1u;
        if (any_bad) { mism += 1u; first_bad = min(first_bad, (u32)p); }
      }
    }
    s = warp_sum(s);
    const float mn = fmaxf(m, s);
    const float al = ex2(m - mn), pw = ex2(s - mn);
    l = l * al + pw;
    m = mn;
    #pragma unroll
    for (int c = 0; c < GCPL; ++c) acc[c] = acc[c] * al + pw * bf16f(vb[c]);
  }
  if (lane == 0) { sm_ml[warp][0] = m; sm_ml[warp][1] = l; }
  #pragma unroll
  for (int c = 0; c < GCPL; ++c) {
    const int d = lane + 32 * c;
    if (d < GHD) sm_o[warp][d] = acc[c];
  }
  __syncthreads();
  store_merged_rows<GNWARPS>(&sm_o[0][0], &sm_ml[0][0], 1, 1, GHD, orow, nsplit, split, out, part_o, part_ml);
  if (verifier) flush_record(verify + (size_t)seq * 8, mism, first_bad, reads, cks);
  if (nsplit > 1)
    combine_if_last(part_o, part_ml, out, counters + ((size_t)blockIdx.y * gridDim.z + blockIdx.z) * G + h,
                    nsplit, orow, 1, GHD);
}
#endif

