// The common module (left out of decode modules by ATTN_ONLY): K/V writes, zero and copy of
// blocks, the recurrent-state update, the MoE layer and the clock warm-up spin.
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

