// ---------------------------------------------------------------- MLA latent decode (CUDA cores)
// grid (nsplit * head_tiles, seqs, layers), 128 threads; a warp reads one latent row at a time,
// each lane 8-dim chunks lane, lane+32, ...; K = V = the latent row.
#ifdef LD
#define NCH (LD / 8)
#define CPL ((NCH + 31) / 32)
#define NWARPS 4
extern "C" __global__ void __launch_bounds__(128) attn_latent(DECODE_PARAMS) {
  __shared__ float sm_o[NWARPS][GT][LD];
  __shared__ float sm_ml[NWARPS][GT][2];
  const int head_tiles = G / GT;
  const int split = blockIdx.x / head_tiles;
  const int ht = blockIdx.x - split * head_tiles;
  const int seq = blockIdx.y;
  const int layer = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int lo = lo_arr[seq], hi = hi_arr[seq];
  const int s_begin = (lo & ~31) + split * split_tokens;
  const int s_end = min(hi, s_begin + split_tokens);
  const bool verifier = ht == 0;
  const size_t block_elems = (size_t)layers * bs * (LD + MLA_ROW_PAD);
  const size_t layer_off = (size_t)layer * bs * (LD + MLA_ROW_PAD);
  const u32* tbl = tables + (size_t)seq * table_stride;
  const u64* tags = expected + (size_t)seq * exp_stride;
  const int q_heads = G;
  const int qh0 = ht * GT;
  float qf[GT][CPL][8];
  #pragma unroll
  for (int g = 0; g < GT; ++g) {
    const u16* qrow = q + (((size_t)seq * layers + layer) * q_heads + qh0 + g) * LD;
    #pragma unroll
    for (int c = 0; c < CPL; ++c) {
      const int ch = lane + 32 * c;
      uint4 v = make_uint4(0u, 0u, 0u, 0u);
      if (ch < NCH) v = *(const uint4*)(qrow + ch * 8);
      const u32 w[4] = {v.x, v.y, v.z, v.w};
      #pragma unroll
      for (int i = 0; i < 4; ++i) {
        qf[g][c][2 * i] = bf16f(w[i] & 0xffffu) * scale_log2;
        qf[g][c][2 * i + 1] = bf16f(w[i] >> 16) * scale_log2;
      }
    }
  }
  float m[GT], l[GT], acc[GT][CPL][8];
  #pragma unroll
  for (int g = 0; g < GT; ++g) {
    m[g] = NEG_INF; l[g] = 0.f;
    #pragma unroll
    for (int c = 0; c < CPL; ++c) {
      #pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][c][i] = 0.f;
    }
  }
  u32 mism = 0u, first_bad = 0xffffffffu, reads = 0u;
  u64 cks = 0ull;
  for (int p = max(s_begin, lo) + warp; p < s_end; p += NWARPS) {
    const u32 blk = __ldg(tbl + p / bs);
    const uint4* row = (const uint4*)(pool + (size_t)blk * block_elems + layer_off + (size_t)(p % bs) * (LD + MLA_ROW_PAD));
    uint4 kv[CPL];
    #pragma unroll
    for (int c = 0; c < CPL; ++c) {
      const int ch = lane + 32 * c;
      kv[c] = ch < NCH ? __ldg(row + ch) : make_uint4(0u, 0u, 0u, 0u);
    }
    if (verifier && lane == 0) {
      const u64 got = ((u64)kv[0].y << 32) | (u64)kv[0].x;
      reads += 1u; cks += got;
      if (got != __ldg(tags + p)) { mism += 1u; first_bad = min(first_bad, (u32)p); }
    }
    float kf[CPL][8];
    #pragma unroll
    for (int c = 0; c < CPL; ++c) {
      const u32 w[4] = {kv[c].x, kv[c].y, kv[c].z, kv[c].w};
      #pragma unroll
      for (int i = 0; i < 4; ++i) { kf[c][2 * i] = bf16f(w[i] & 0xffffu); kf[c][2 * i + 1] = bf16f(w[i] >> 16); }
    }
    #pragma unroll
    for (int g = 0; g < GT; ++g) {
      float s = 0.f;
      #pragma unroll
      for (int c = 0; c < CPL; ++c) {
        #pragma unroll
        for (int i = 0; i < 8; ++i) s += qf[g][c][i] * kf[c][i];
      }
      s = warp_sum(s);
      const float mn = fmaxf(m[g], s);
      const float al = ex2(m[g] - mn), pw = ex2(s - mn);
      l[g] = l[g] * al + pw;
      m[g] = mn;
      #pragma unroll
      for (int c = 0; c < CPL; ++c) {
        #pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][c][i] = acc[g][c][i] * al + pw * kf[c][i];
      }
    }
  }
  #pragma unroll
  for (int g = 0; g < GT; ++g) {
    if (lane == 0) { sm_ml[warp][g][0] = m[g]; sm_ml[warp][g][1] = l[g]; }
    #pragma unroll
    for (int c = 0; c < CPL; ++c) {
      const int ch = lane + 32 * c;
      if (ch < NCH) {
        #pragma unroll
        for (int i = 0; i < 8; ++i) sm_o[warp][g][ch * 8 + i] = acc[g][c][i];
      }
    }
  }
  __syncthreads();
  store_merged_rows<NWARPS>(&sm_o[0][0][0], &sm_ml[0][0][0], GT, GT, LD,
                            ((size_t)seq * layers + layer) * q_heads + qh0, nsplit, split, out, part_o, part_ml);
  if (verifier) flush_record(verify + (size_t)seq * 8, mism, first_bad, reads, cks);
  if (nsplit > 1)
    combine_if_last(part_o, part_ml, out, counters + ((size_t)blockIdx.y * gridDim.z + blockIdx.z) * head_tiles + ht,
                    nsplit, ((size_t)seq * layers + layer) * q_heads + qh0, GT, LD);
}
#endif

