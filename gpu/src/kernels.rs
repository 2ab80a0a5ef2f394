//! CUDA C++ source of every kernel, compiled at run time with NVRTC for `sm_90`.
//!
//! One source: the common kernels (prefill, zero, copy, state, MoE) compile unless `ATTN_ONLY`
//! is defined; `#define HD/HT` adds the tensor-core decode kernel `attn_mma` for one head dim
//! and head tile, `#define GHD` the CUDA-core `attn_generic`, `#define LD/GT` the CUDA-core MLA
//! kernel `attn_latent` (these three combine their flash-decoding splits in-kernel), and
//! `#define LDM/GTM/LNST` the tensor-core MLA kernel `attn_latent_mma` with its split combine
//! `latent_combine` (a second launch). The content formulas mirror [`crate::content`]. No
//! headers are included, so NVRTC needs no CUDA include path.
//!
//! Verification records (one per request x group x op, 8 `u32`s):
//! `[0]` mismatched reads, `[1]` first mismatched position (state: first (layer, head) row),
//! `[2]` rows read, `[3]` unused, `[4..6]` wrapping `u64` sum of the tags read.

/// `u32`s per verification record.
pub const RECORD_WORDS: usize = 8;
/// Threads per CTA of the decode kernels (four warps; the tensor-core latent kernel has two
/// groups of four, see `lower::AttnKernel::threads`).
pub const DECODE_THREADS: u32 = 128;

/// Names of the kernels in the common module.
pub const COMMON_KERNELS: [&str; 9] = [
    "write_kv",
    "zero_blocks",
    "copy_blocks",
    "state_update",
    "moe_init",
    "moe_route",
    "moe_up",
    "moe_down",
    "spin",
];

/// The source.
pub const SOURCE: &str = r#"
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
__device__ __forceinline__ void combine_if_last(const float* part_o, const float* part_ml, float* out,
    u32* counter, int nsplit, size_t orow0, int rows, int dv) {
  __shared__ u32 sm_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const u32 prev = atomicAdd(counter, 1u);
    sm_last = prev == (u32)(nsplit - 1) ? 1u : 0u;
    if (sm_last) atomicExch(counter, 0u);
  }
  __syncthreads();
  if (!sm_last) return;
  __threadfence();
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

__device__ __forceinline__ float dot8(uint4 w, const float* x) {
  return bf16f(w.x & 0xffffu) * x[0] + bf16f(w.x >> 16) * x[1] + bf16f(w.y & 0xffffu) * x[2] + bf16f(w.y >> 16) * x[3]
       + bf16f(w.z & 0xffffu) * x[4] + bf16f(w.z >> 16) * x[5] + bf16f(w.w & 0xffffu) * x[6] + bf16f(w.w >> 16) * x[7];
}
__device__ __forceinline__ float warp_sum(float v) {
  #pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

#ifndef ATTN_ONLY
// ---------------------------------------------------------------- K/V writes, zero, copy
// grid (tokens, layers): one row per written token, all requests of a step's consecutive
// prefills in one launch (vLLM's reshape_and_cache). blocks[i] is the block position
// positions[i] lands in (0 = the null block: skipped, as vLLM skips slot -1). planes 2: K
// row-major + V transposed; planes 1: MLA latent.
extern "C" __global__ void write_kv(u16* __restrict__ pool, const u32* __restrict__ tokens,
    const u32* __restrict__ positions, const u32* __restrict__ blocks, int layers, int kv_heads,
    int head_dim, int bs, int planes, u64 block_elems) {
  const u32 pos = positions[blockIdx.x];
  const u32 layer = blockIdx.y;
  const u32 blk = blocks[blockIdx.x];
  if (blk == 0u) return;
  const u32 slot = pos % (u32)bs;
  const u32 token = tokens[blockIdx.x];
  const int row = planes == 1 ? head_dim + MLA_ROW_PAD : head_dim;  // MLA rows are padded
  const size_t head_elems = (size_t)bs * row;
  const size_t plane_elems = (size_t)kv_heads * head_elems;
  u16* base = pool + (size_t)blk * block_elems + (size_t)layer * planes * plane_elems;
  const int n = kv_heads * head_dim;
  for (int idx = threadIdx.x; idx < n; idx += blockDim.x) {
    const int h = idx / head_dim, d = idx - h * head_dim;
    base[h * head_elems + (size_t)slot * row + d] = kv_bits(token, pos, layer, h, d, 0u);
    if (planes == 2)
      base[plane_elems + h * head_elems + (size_t)d * bs + slot] = kv_bits(token, pos, layer, h, d, 1u);
  }
}

// grid (blocks, chunks): zero whole blocks.
extern "C" __global__ void zero_blocks(uint4* __restrict__ pool, const u32* __restrict__ blocks, u64 block_vecs) {
  uint4* p = pool + (size_t)blocks[blockIdx.x] * block_vecs;
  const uint4 z = make_uint4(0u, 0u, 0u, 0u);
  for (u64 i = threadIdx.x + (u64)blockIdx.y * blockDim.x; i < block_vecs; i += (u64)blockDim.x * gridDim.y) p[i] = z;
}

// grid (copies, chunks): pairs = [src0, dst0, src1, dst1, ...].
extern "C" __global__ void copy_blocks(uint4* __restrict__ pool, const u32* __restrict__ pairs, u64 block_vecs) {
  const uint4* s = pool + (size_t)pairs[2 * blockIdx.x] * block_vecs;
  uint4* d = pool + (size_t)pairs[2 * blockIdx.x + 1] * block_vecs;
  if (s == d) return;
  for (u64 i = threadIdx.x + (u64)blockIdx.y * blockDim.x; i < block_vecs; i += (u64)blockDim.x * gridDim.y) d[i] = s[i];
}

// ---------------------------------------------------------------- recurrent state
// grid (layers * heads). Row = [tokens consumed, checksum, state...] (f32 bits).
extern "C" __global__ void state_update(float* __restrict__ pool, const u32* __restrict__ tokens, int ntok,
    u32 src_block, u32 dst_block, int heads, int state_dim, u32 exp_count, u32 exp_cks, u32* __restrict__ rec) {
  const u32 lh = blockIdx.x;
  const u32 layer = lh / heads, head = lh - layer * heads;
  const size_t block_elems = (size_t)gridDim.x * state_dim;
  const float* src = pool + (size_t)src_block * block_elems + (size_t)lh * state_dim;
  float* dst = pool + (size_t)dst_block * block_elems + (size_t)lh * state_dim;
  const u32 count = __float_as_uint(src[0]);
  const u32 cks = __float_as_uint(src[1]);
  __syncthreads();
  for (int d = 2 + threadIdx.x; d < state_dim; d += blockDim.x) {
    float s = src[d];
    for (int i = 0; i < ntok; ++i)
      s = fmaf(s, 0.875f, byte_f32(content_hash(tokens[i], count + i, layer, head, d, 2u)));
    dst[d] = s;
  }
  if (threadIdx.x == 0) {
    atomicAdd(rec + 2, 1u);
    atomicAdd((u64*)(rec + 4), (u64)cks);
    if (count != exp_count || cks != exp_cks) { atomicAdd(rec, 1u); atomicMin(rec + 1, lh); }
    u32 h = cks;
    for (int i = 0; i < ntok; ++i) h = fmix32(h ^ tag32(tokens[i], count + i));
    dst[0] = __uint_as_float(count + (u32)ntok);
    dst[1] = __uint_as_float(h);
  }
}

// ---------------------------------------------------------------- MoE

// Weights: small bf16 values (k / 2048), a hash of the index.
extern "C" __global__ void moe_init(u16* __restrict__ w, u64 n, u32 salt) {
  for (u64 i = threadIdx.x + (u64)blockIdx.x * blockDim.x; i < n; i += (u64)blockDim.x * gridDim.x) {
    const float f = byte_f32(fmix32((u32)i ^ fmix32((u32)(i >> 32) + salt))) * 0.0625f;
    w[i] = (u16)(__float_as_uint(f) >> 16);
  }
}

// grid (tokens), 128 threads, shared = experts floats. x = embedding of the token id, or (an > 0 and
// arow[t] != ~0) the attention output row A[arow[t] ..+ an] (folded onto H) plus beta x a bias shared
// by all tokens.
extern "C" __global__ void moe_route(const u32* __restrict__ tokens, const u16* __restrict__ router, int H, int E,
    int top_k, int ntok, float* __restrict__ X, u32* __restrict__ counts, u32* __restrict__ lists,
    float* __restrict__ wlist, const float* __restrict__ A, const u32* __restrict__ arow, int an, float beta) {
  extern __shared__ float logits[];
  const int t = blockIdx.x;
  const u32 tok = tokens[t];
  float* x = X + (size_t)t * H;
  if (an > 0 && arow[t] != 0xffffffffu) {
    const float* a = A + arow[t];
    for (int h = threadIdx.x; h < H; h += blockDim.x)
      x[h] = __ldcg(a + (h % an)) + beta * byte_f32(content_hash(0u, 0u, 1022u, 0u, h, 3u));
  } else {
    for (int h = threadIdx.x; h < H; h += blockDim.x) x[h] = byte_f32(content_hash(tok, 0u, 1023u, 0u, h, 3u));
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  for (int e = warp; e < E; e += nw) {
    const uint4* r = (const uint4*)(router + (size_t)e * H);
    float s = 0.f;
    for (int c = lane; c < H / 8; c += 32) s += dot8(r[c], x + c * 8);
    s = warp_sum(s);
    if (lane == 0) logits[e] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int ids[8]; float vals[8];
    for (int k = 0; k < top_k; ++k) {
      int best = 0; float bv = NEG_INF;
      for (int e = 0; e < E; ++e) if (logits[e] > bv) { bv = logits[e]; best = e; }
      ids[k] = best; vals[k] = bv; logits[best] = NEG_INF;
    }
    float z = 0.f;
    for (int k = 0; k < top_k; ++k) { vals[k] = ex2((vals[k] - vals[0]) * 1.4426950408889634f); z += vals[k]; }
    for (int k = 0; k < top_k; ++k) {
      const u32 slot = atomicAdd(counts + ids[k], 1u);
      lists[(size_t)ids[k] * ntok + slot] = (u32)t;
      wlist[(size_t)ids[k] * ntok + slot] = vals[k] / z;
    }
  }
}

// grid (experts, F / 64), 128 threads: Hb[e][i][f] = silu(W1[e][f] . X[token_i]).
extern "C" __global__ void moe_up(const u16* __restrict__ w1, const float* __restrict__ X, const u32* __restrict__ counts,
    const u32* __restrict__ lists, float* __restrict__ Hb, int H, int F, int ntok) {
  const int e = blockIdx.x;
  const int n = (int)counts[e];
  if (n == 0) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int f = blockIdx.y * 64 + warp; f < (blockIdx.y + 1) * 64; f += 4) {
    const uint4* w = (const uint4*)(w1 + ((size_t)e * F + f) * H);
    for (int i = 0; i < n; ++i) {
      const float* x = X + (size_t)lists[(size_t)e * ntok + i] * H;
      float s = 0.f;
      for (int c = lane; c < H / 8; c += 32) s += dot8(w[c], x + c * 8);
      s = warp_sum(s);
      if (lane == 0) Hb[((size_t)e * ntok + i) * F + f] = s / (1.f + ex2(-s * 1.4426950408889634f));
    }
  }
}

// grid (experts, H / 64), 128 threads: Y[token_i][h] += w_i * W2[e][h] . Hb[e][i].
extern "C" __global__ void moe_down(const u16* __restrict__ w2, const float* __restrict__ Hb, const u32* __restrict__ counts,
    const u32* __restrict__ lists, const float* __restrict__ wlist, float* __restrict__ Y, int H, int F, int ntok) {
  const int e = blockIdx.x;
  const int n = (int)counts[e];
  if (n == 0) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int h = blockIdx.y * 64 + warp; h < (blockIdx.y + 1) * 64; h += 4) {
    const uint4* w = (const uint4*)(w2 + ((size_t)e * H + h) * F);
    for (int i = 0; i < n; ++i) {
      const float* hb = Hb + ((size_t)e * ntok + i) * F;
      float s = 0.f;
      for (int c = lane; c < F / 8; c += 32) s += dot8(w[c], hb + c * 8);
      s = warp_sum(s);
      if (lane == 0) atomicAdd(Y + (size_t)lists[(size_t)e * ntok + i] * H + h, s * wlist[(size_t)e * ntok + i]);
    }
  }
}

// Busy for `ns` nanoseconds of the global timer (warms the clocks up before a timed run).
extern "C" __global__ void spin(u64 ns) {
  u64 t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

#endif  // ATTN_ONLY

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
  const int seq = blockIdx.y;
  const int layer = blockIdx.z / kv_heads;
  const int kvh = blockIdx.z - layer * kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gid = lane >> 2, tid = lane & 3;
  const int lo = lo_arr[seq], hi = hi_arr[seq];
  const int s_begin = (lo & ~31) + split * split_tokens;
  const int s_end = min(hi, s_begin + split_tokens);
  const bool verifier = ht == 0;
  const size_t head_elems = (size_t)bs * HD;
  const size_t plane_elems = (size_t)kv_heads * head_elems;
  const size_t block_elems = (size_t)layers * 2 * plane_elems;
  const size_t k_off = (size_t)layer * 2 * plane_elems + (size_t)kvh * head_elems;
  const size_t v_off = k_off + plane_elems;
  const u32* tbl = tables + (size_t)seq * table_stride;
  const u64* tags = expected + (size_t)seq * exp_stride;
  const int q_heads = kv_heads * G;
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
  for (int idx = threadIdx.x; idx < HT * HD; idx += blockDim.x) {
    const int r = idx / HD, d = idx - r * HD;
    float M = NEG_INF;
    #pragma unroll
    for (int w = 0; w < NWARPS; ++w) M = fmaxf(M, sm_ml[w][r][0]);
    float L = 0.f, O = 0.f;
    #pragma unroll
    for (int w = 0; w < NWARPS; ++w) {
      const float mw = sm_ml[w][r][0];
      const float f = mw == NEG_INF ? 0.f : ex2(mw - M);
      L += sm_ml[w][r][1] * f; O += sm_o[w][r][d] * f;
    }
    const size_t orow = ((size_t)seq * layers + layer) * q_heads + qh0 + r;
    if (nsplit == 1) {
      out[orow * HD + d] = L > 0.f ? O / L : 0.f;
    } else {
      const size_t prow = orow * nsplit + split;
      part_o[prow * HD + d] = O;
      if (d == 0) { part_ml[prow * 2] = M; part_ml[prow * 2 + 1] = L; }
    }
  }
  if (verifier) flush_record(verify + (size_t)seq * 8, mism, first_bad, reads, cks);
  if (nsplit > 1)
    combine_if_last(part_o, part_ml, out, counters + ((size_t)blockIdx.y * gridDim.z + blockIdx.z) * head_tiles + ht,
                    nsplit, ((size_t)seq * layers + layer) * q_heads + qh0, HT, HD);
#undef LOAD_K
#undef LOAD_V
}
#endif

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
  const int seq = blockIdx.y;
  const int layer = blockIdx.z / kv_heads;
  const int kvh = blockIdx.z - layer * kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int lo = lo_arr[seq], hi = hi_arr[seq];
  const int s_begin = (lo & ~31) + split * split_tokens;
  const int s_end = min(hi, s_begin + split_tokens);
  const bool verifier = h == 0;
  const size_t head_elems = (size_t)bs * GHD;
  const size_t plane_elems = (size_t)kv_heads * head_elems;
  const size_t block_elems = (size_t)layers * 2 * plane_elems;
  const size_t k_off = (size_t)layer * 2 * plane_elems + (size_t)kvh * head_elems;
  const size_t v_off = k_off + plane_elems;
  const u32* tbl = tables + (size_t)seq * table_stride;
  const u64* tags = expected + (size_t)seq * exp_stride;
  const int q_heads = kv_heads * G;
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
  for (int d = threadIdx.x; d < GHD; d += blockDim.x) {
    float M = NEG_INF;
    #pragma unroll
    for (int w = 0; w < GNWARPS; ++w) M = fmaxf(M, sm_ml[w][0]);
    float L = 0.f, O = 0.f;
    #pragma unroll
    for (int w = 0; w < GNWARPS; ++w) {
      const float mw = sm_ml[w][0];
      const float f = mw == NEG_INF ? 0.f : ex2(mw - M);
      L += sm_ml[w][1] * f; O += sm_o[w][d] * f;
    }
    if (nsplit == 1) {
      out[orow * GHD + d] = L > 0.f ? O / L : 0.f;
    } else {
      const size_t prow = orow * nsplit + split;
      part_o[prow * GHD + d] = O;
      if (d == 0) { part_ml[prow * 2] = M; part_ml[prow * 2 + 1] = L; }
    }
  }
  if (verifier) flush_record(verify + (size_t)seq * 8, mism, first_bad, reads, cks);
  if (nsplit > 1)
    combine_if_last(part_o, part_ml, out, counters + ((size_t)blockIdx.y * gridDim.z + blockIdx.z) * G + h,
                    nsplit, orow, 1, GHD);
}
#endif

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
  for (int idx = threadIdx.x; idx < GT * LD; idx += blockDim.x) {
    const int r = idx / LD, d = idx - r * LD;
    float M = NEG_INF;
    #pragma unroll
    for (int w = 0; w < NWARPS; ++w) M = fmaxf(M, sm_ml[w][r][0]);
    float L = 0.f, O = 0.f;
    #pragma unroll
    for (int w = 0; w < NWARPS; ++w) {
      const float mw = sm_ml[w][r][0];
      const float f = mw == NEG_INF ? 0.f : ex2(mw - M);
      L += sm_ml[w][r][1] * f; O += sm_o[w][r][d] * f;
    }
    const size_t orow = ((size_t)seq * layers + layer) * q_heads + qh0 + r;
    if (nsplit == 1) {
      out[orow * LD + d] = L > 0.f ? O / L : 0.f;
    } else {
      const size_t prow = orow * nsplit + split;
      part_o[prow * LD + d] = O;
      if (d == 0) { part_ml[prow * 2] = M; part_ml[prow * 2 + 1] = L; }
    }
  }
  if (verifier) flush_record(verify + (size_t)seq * 8, mism, first_bad, reads, cks);
  if (nsplit > 1)
    combine_if_last(part_o, part_ml, out, counters + ((size_t)blockIdx.y * gridDim.z + blockIdx.z) * head_tiles + ht,
                    nsplit, ((size_t)seq * layers + layer) * q_heads + qh0, GT, LD);
}
#endif

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
  u16* sm_kv = (u16*)sm_raw;                                        // [LNST][LTT][LROW]
  float* sm_red = (float*)(sm_kv + LNST * LTT * LROW) + grp * (4 * 16 * LRED);  // [2][4][16][LRED]
  u16* sm_p = (u16*)((float*)(sm_kv + LNST * LTT * LROW) + 2 * 4 * 16 * LRED) + grp * (16 * LPS);
  float* sm_mx = (float*)((u16*)((float*)(sm_kv + LNST * LTT * LROW) + 2 * 4 * 16 * LRED) + 2 * 16 * LPS);
  float* sm_l = sm_mx + 2 * 64;                                     // [2][4][16]
  float* sm_ml = sm_l + 2 * 64;                                     // [16][2]: group 1's (M, L)
  sm_mx += grp * 64;
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
"#;

/// The source of a decode module: `defines` (each a full `#define` line) and only the decode
/// kernel they select (`ATTN_ONLY` leaves the common kernels out).
pub fn specialised(defines: &str) -> String {
    format!("#define ATTN_ONLY\n{defines}{SOURCE}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_common_kernel_is_in_the_source() {
        for name in COMMON_KERNELS {
            assert!(SOURCE.contains(&format!("void {name}(")), "{name}");
        }
        assert!(SOURCE.contains("attn_mma("));
        assert!(SOURCE.contains("attn_latent("));
        assert!(SOURCE.contains("attn_generic("));
    }

    #[test]
    fn formulas_match_the_rust_twins() {
        // The constants of the hash functions appear verbatim in both implementations.
        for c in [
            "0x85ebca6bu",
            "0xc2b2ae35u",
            "0x9E3779B1u",
            "0x7F4A7C15u",
            "0x2545F491u",
            "1031u",
            "8191u",
            "0.875f",
        ] {
            assert!(SOURCE.contains(c), "{c}");
        }
    }
}
