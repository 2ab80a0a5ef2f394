// Shared by every kernel: types, the content formulas (mirrored by content.rs), the MMA and
// packing helpers, the verification record flush, the split combine and the decode parameters.
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

#define NEG_INF (__int_as_float(0xff800000))
// Unused elements after each MLA latent row (layout::MLA_ROW_PAD).
#define MLA_ROW_PAD 8

__device__ __forceinline__ u32 fmix32(u32 h) {
  h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16; return h;
}
__device__ __forceinline__ u32 tag32(u32 token, u32 pos) {
  return fmix32((token * 0x9E3779B1u) ^ fmix32(pos + 0x7F4A7C15u));
}
__device__ __forceinline__ u16 byte_bf16(u32 b) {
  float f = ((float)((int)(b & 0xffu) - 128)) * 0.0078125f;
  return (u16)(__float_as_uint(f) >> 16);
}
__device__ __forceinline__ float byte_f32(u32 b) {
  return ((float)((int)(b & 0xffu) - 128)) * 0.0078125f;
}
__device__ __forceinline__ u32 content_hash(u32 token, u32 pos, u32 layer, u32 head, u32 dim, u32 plane) {
  u32 coord = ((layer * 1031u + head) * 8191u + dim) * 4u + plane + 0x2545F491u;
  return fmix32(tag32(token, pos) ^ fmix32(coord));
}
__device__ __forceinline__ u16 kv_bits(u32 token, u32 pos, u32 layer, u32 head, u32 dim, u32 plane) {
  u32 b = dim < 4u ? (tag32(token, pos) >> (8u * dim)) : content_hash(token, pos, layer, head, dim, plane);
  return byte_bf16(b);
}
__device__ __forceinline__ float bf16f(u32 bits16) { return __uint_as_float(bits16 << 16); }
__device__ __forceinline__ float ex2(float x) {
  float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y;
}
__device__ __forceinline__ u32 pack_bf16(float lo, float hi) {
  u32 r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r;
}
__device__ __forceinline__ void mma16816(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void flush_record(u32* rec, u32 mism, u32 first_bad, u32 reads, u64 cks) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    mism += __shfl_xor_sync(0xffffffffu, mism, o);
    first_bad = min(first_bad, __shfl_xor_sync(0xffffffffu, first_bad, o));
    reads += __shfl_xor_sync(0xffffffffu, reads, o);
    cks += __shfl_xor_sync(0xffffffffu, cks, o);
  }
  if ((threadIdx.x & 31) == 0) {
    if (reads) atomicAdd(rec + 2, reads);
    if (mism) { atomicAdd(rec, mism); atomicMin(rec + 1, first_bad); }
    if (cks) atomicAdd((u64*)(rec + 4), cks);
  }
}

// Split combine, fused: every CTA of a split decode writes its partial rows (unnormalised O, max
// M, sum L per head); the last of the nsplit CTAs sharing (seq, layer, kv head, head tile), found
// with a counter (reset by that CTA for the next launch), combines them:
// out = sum_s O_s 2^(M_s - M) / sum_s L_s 2^(M_s - M).
// True, in every thread that takes part, in the last of the nsplit CTAs counting on `counter`
// to finish its partial rows (that CTA resets the counter for the next launch). `sync` is the
// barrier of the threads taking part: __syncthreads, or a named barrier once some warps left.
template <typename Sync>
__device__ __forceinline__ bool last_split_cta(u32* counter, int nsplit, Sync sync) {
  __shared__ u32 sm_last;
  __threadfence();
  sync();
  if (threadIdx.x == 0) {
    const u32 prev = atomicAdd(counter, 1u);
    sm_last = prev == (u32)(nsplit - 1) ? 1u : 0u;
    if (sm_last) atomicExch(counter, 0u);
  }
  sync();
  if (!sm_last) return false;
  __threadfence();
  return true;
}

__device__ __forceinline__ void combine_if_last(const float* part_o, const float* part_ml, float* out,
    u32* counter, int nsplit, size_t orow0, int rows, int dv) {
  if (!last_split_cta(counter, nsplit, [] { __syncthreads(); })) return;
  for (int idx = threadIdx.x; idx < rows * dv; idx += blockDim.x) {
    const int r = idx / dv, d = idx - r * dv;
    const size_t orow = orow0 + r;
    const float* ml = part_ml + orow * nsplit * 2;
    float M = NEG_INF;
    for (int s = 0; s < nsplit; ++s) M = fmaxf(M, __ldcg(ml + 2 * s));
    float L = 0.f, O = 0.f;
    for (int s = 0; s < nsplit; ++s) {
      const float m = __ldcg(ml + 2 * s);
      if (m != NEG_INF) {
        const float f = ex2(m - M);
        L += __ldcg(ml + 2 * s + 1) * f;
        O += __ldcg(part_o + (orow * nsplit + s) * dv + d) * f;
      }
    }
    out[orow * dv + d] = L > 0.f ? O / L : 0.f;
  }
}

// The parameters every decode kernel takes (one launch path in the executor).
#define DECODE_PARAMS                                                                           \
    const u16* __restrict__ pool, const u32* __restrict__ tables, int table_stride,            \
    const int* __restrict__ lo_arr, const int* __restrict__ hi_arr,                             \
    const u64* __restrict__ expected, int exp_stride, const u16* __restrict__ q,                \
    float* __restrict__ part_o, float* __restrict__ part_ml, float* __restrict__ out,           \
    u32* __restrict__ counters, u32* __restrict__ verify,                                       \
    int layers, int kv_heads, int G, int bs, int split_tokens, int nsplit, float scale_log2

// The common start of the K/V decode kernels (K row-major, V transposed, head dim HDIM), after
// `split` is known: declares the CTA's request `seq`, `layer`, KV head `kvh`, its attended range
// `lo`..`hi` and its split's `s_begin`..`s_end`, the K and V plane offsets in a block, its block
// table `tbl`, expected tags `tags`, and `q_heads`.
#define KV_DECODE_CTA(HDIM)                                                                   \
  const int seq = blockIdx.y;                                                                 \
  const int layer = blockIdx.z / kv_heads;                                                    \
  const int kvh = blockIdx.z - layer * kv_heads;                                              \
  const int lo = lo_arr[seq], hi = hi_arr[seq];                                               \
  const int s_begin = (lo & ~31) + split * split_tokens;                                      \
  const int s_end = min(hi, s_begin + split_tokens);                                          \
  const size_t head_elems = (size_t)bs * (HDIM);                                              \
  const size_t plane_elems = (size_t)kv_heads * head_elems;                                   \
  const size_t block_elems = (size_t)layers * 2 * plane_elems;                                \
  const size_t k_off = (size_t)layer * 2 * plane_elems + (size_t)kvh * head_elems;            \
  const size_t v_off = k_off + plane_elems;                                                   \
  const u32* tbl = tables + (size_t)seq * table_stride;                                       \
  const u64* tags = expected + (size_t)seq * exp_stride;                                      \
  const int q_heads = kv_heads * G

// The end of a decode CTA whose NW warps each kept an online-softmax state: warp w's row r has
// (M, L) at ml[(w * ml_rows + r) * 2 ..] and O at o[(w * rows + r) * dv + d] in shared memory.
// Merges them and writes each of the `rows` rows: normalised to `out` with one split, else
// unnormalised to the split's partial row, with its M and L.
template <int NW>
__device__ __forceinline__ void store_merged_rows(const float* o, const float* ml, int ml_rows, int rows, int dv,
    size_t orow0, int nsplit, int split, float* out, float* part_o, float* part_ml) {
  for (int idx = threadIdx.x; idx < rows * dv; idx += blockDim.x) {
    const int r = idx / dv, d = idx - r * dv;
    float M = NEG_INF;
    #pragma unroll
    for (int w = 0; w < NW; ++w) M = fmaxf(M, ml[(w * ml_rows + r) * 2]);
    float L = 0.f, O = 0.f;
    #pragma unroll
    for (int w = 0; w < NW; ++w) {
      const float mw = ml[(w * ml_rows + r) * 2];
      const float f = mw == NEG_INF ? 0.f : ex2(mw - M);
      L += ml[(w * ml_rows + r) * 2 + 1] * f; O += o[(w * rows + r) * dv + d] * f;
    }
    const size_t orow = orow0 + r;
    if (nsplit == 1) {
      out[orow * dv + d] = L > 0.f ? O / L : 0.f;
    } else {
      const size_t prow = orow * nsplit + split;
      part_o[prow * dv + d] = O;
      if (d == 0) { part_ml[prow * 2] = M; part_ml[prow * 2 + 1] = L; }
    }
  }
}

__device__ __forceinline__ float dot8(uint4 w, const float* x) {
  return bf16f(w.x & 0xffffu) * x[0] + bf16f(w.x >> 16) * x[1] + bf16f(w.y & 0xffffu) * x[2] + bf16f(w.y >> 16) * x[3]
       + bf16f(w.z & 0xffffu) * x[4] + bf16f(w.z >> 16) * x[5] + bf16f(w.w & 0xffffu) * x[6] + bf16f(w.w >> 16) * x[7];
}
__device__ __forceinline__ float warp_sum(float v) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

