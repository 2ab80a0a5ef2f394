// The MoE GEMMs (gpu/src/cuda/common.cu `moe_up`, `moe_down`) timed alone under routing the
// host sets, and where the CTAs of their grids land (issue 21: the cost model's `gemm_walk`
// deals CTAs to SMs in launch order; this measures whether the device does).
//
// Built and run on the device (nvcc, from the repository root):
//   nvcc -O3 -std=c++17 -arch=sm_90 -I gpu/src/cuda scripts/timing/moe_kernels.cu -o moe_kernels
//   ./moe_kernels > moe_kernels.csv
// Rows (CSV, header first):
//   time,KERNEL,E,TOKENS,TOP_K,PATTERN,MEDIAN_US,MIN_US,COUNTS   one kernel timed alone (events,
//        L2 warm: the same weights every repeat), COUNTS the tokens per expert joined by ';'
//   place,KERNEL,E,PATTERN,CTA,SM,START_NS,END_NS               a probe of the same grid and
//        block as KERNEL, each CTA busy for its expert's load, recording %smid and the timer
// With the argument `deal` it prints instead, for every grid of N = 1..1600 CTAs of 128 threads
// (all resident at once, each busy 20 us), the SM of each CTA in launch order:
//   deal,N,SM SM SM ...
// With `deal2d`, the grids of the MoE GEMMs' shapes and one-dimensional ones, each three times
// (see `deal2d_rows`).
// H = 1024 and F = 512, the blind sets' MoE (docs/timing.md).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <string>
#include <vector>
#include "prelude.cuh"
#include "common.cu"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1); } } while (0)

// grid (E, outer / 64), 128 threads, as moe_up / moe_down: busy load[e] * unit_ns, then
// records (smid, start, end) at its linear index.
extern "C" __global__ void probe(const u32* __restrict__ counts, u64 unit_ns, u64* __restrict__ rec) {
  u64 t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const u32 n = counts[blockIdx.x];
  if (n != 0) {
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < unit_ns * n);
  }
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  if (threadIdx.x == 0) {
    u32 sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    const size_t i = blockIdx.x + (size_t)gridDim.x * blockIdx.y;
    rec[3 * i] = sm; rec[3 * i + 1] = t0; rec[3 * i + 2] = t;
  }
}

static const int H = 1024, F = 512, EMAX = 96, TMAX = 4096;
static u16 *w1, *w2;
static float *X, *Hb, *Y, *wl;
static u32 *cnt, *lists;
static u64 *rec;

// Tokens per expert: top_k distinct experts per token from a fixed LCG (uniform, as the
// hidden-state router spreads them), or the named pattern.
static std::vector<u32> route(int E, int T, int k, unsigned seed) {
  std::vector<u32> c(E, 0);
  unsigned s = seed * 2654435761u + 12345u;
  for (int t = 0; t < T; ++t) {
    std::vector<int> chosen;
    while ((int)chosen.size() < k) {
      s = s * 1664525u + 1013904223u;
      int e = (s >> 8) % E;
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int e : chosen) c[e]++;
  }
  return c;
}

static void upload(const std::vector<u32>& c) {
  const int E = (int)c.size();
  std::vector<u32> l((size_t)E * TMAX, 0);
  for (int e = 0; e < E; ++e)
    for (u32 i = 0; i < c[e]; ++i) l[(size_t)e * TMAX + i] = (i * 7u + e) % TMAX;
  CK(cudaMemcpy(cnt, c.data(), 4 * E, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(lists, l.data(), 4 * l.size(), cudaMemcpyHostToDevice));
}

static void launch(bool up, int E) {
  if (up) moe_up<<<dim3(E, F / 64), 128>>>(w1, X, cnt, lists, Hb, H, F, TMAX);
  else moe_down<<<dim3(E, H / 64), 128>>>(w2, Hb, cnt, lists, wl, Y, H, F, TMAX);
}

static void time_row(const char* pattern, int E, int T, int k, const std::vector<u32>& c) {
  upload(c);
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  for (int up = 1; up >= 0; --up) {
    std::vector<float> ms;
    for (int r = 0; r < 9; ++r) {
      CK(cudaEventRecord(a));
      launch(up, E);
      CK(cudaEventRecord(b));
      CK(cudaEventSynchronize(b));
      float m; CK(cudaEventElapsedTime(&m, a, b));
      if (r >= 2) ms.push_back(m * 1000.f);
    }
    std::sort(ms.begin(), ms.end());
    std::string cs;
    for (int e = 0; e < E; ++e) cs += (e ? ";" : "") + std::to_string(c[e]);
    printf("time,%s,%d,%d,%d,%s,%.3f,%.3f,%s\n", up ? "up" : "down", E, T, k, pattern, ms[ms.size() / 2], ms[0], cs.c_str());
  }
  CK(cudaEventDestroy(a)); CK(cudaEventDestroy(b));
}

static void place_rows(const char* pattern, int E, const std::vector<u32>& c, u64 unit_ns) {
  upload(c);
  for (int up = 1; up >= 0; --up) {
    const int ys = up ? F / 64 : H / 64, n = E * ys;
    probe<<<dim3(E, ys), 128>>>(cnt, unit_ns, rec);
    CK(cudaDeviceSynchronize());
    probe<<<dim3(E, ys), 128>>>(cnt, unit_ns, rec);
    CK(cudaDeviceSynchronize());
    std::vector<u64> h(3 * (size_t)n);
    CK(cudaMemcpy(h.data(), rec, 8 * h.size(), cudaMemcpyDeviceToHost));
    u64 base = ~0ull;
    for (int i = 0; i < n; ++i) base = std::min(base, h[3 * i + 1]);
    for (int i = 0; i < n; ++i)
      printf("place,%s,%d,%s,%d,%llu,%llu,%llu\n", up ? "up" : "down", E, pattern, i, h[3 * i], h[3 * i + 1] - base, h[3 * i + 2] - base);
  }
}

// The SM of each of the last probe's n CTAs, in launch order, as one line.
static void print_sms(int n) {
  std::vector<u64> h(3 * (size_t)n);
  CK(cudaMemcpy(h.data(), rec, 8 * h.size(), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) printf(i ? " %llu" : "%llu", h[3 * i]);
  printf("\n");
}

// The SM of every CTA of one-dimensional grids of 1..1600 CTAs (see the header).
static void deal_rows() {
  std::vector<u32> busy(1600, 1);
  CK(cudaMemcpy(cnt, busy.data(), 4 * 96, cudaMemcpyHostToDevice));
  for (int n = 1; n <= 1600; ++n) {
    // probe reads counts[blockIdx.x]: a grid (1, n) keeps every CTA on counts[0]; the linear
    // index is blockIdx.x + gridDim.x * blockIdx.y = blockIdx.y, the launch order.
    probe<<<dim3(1, n), 128>>>(cnt, 20000, rec);
    CK(cudaDeviceSynchronize());
    printf("deal,%d,", n);
    print_sms(n);
  }
}

// The SM of every CTA of the MoE GEMMs' two-dimensional grids (E, Y), E = 1..96 and Y = 8, 16 (the
// up and down grids at H = 1024, F = 512), and of one-dimensional grids of the same sizes, each
// launched three times in a row: whether a grid's shape and the launches before it move where
// its CTAs land.
//   deal2d,E,Y,REP,SM SM ...      deal1d,N,REP,SM SM ...
static void deal2d_rows() {
  std::vector<u32> busy(EMAX, 1);
  CK(cudaMemcpy(cnt, busy.data(), 4 * EMAX, cudaMemcpyHostToDevice));
  for (int ys : {8, 16})
    for (int E = 1; E <= EMAX; ++E)
      for (int rep = 0; rep < 3; ++rep) {
        probe<<<dim3(E, ys), 128>>>(cnt, 20000, rec);
        CK(cudaDeviceSynchronize());
        printf("deal2d,%d,%d,%d,", E, ys, rep);
        print_sms(E * ys);
      }
  for (int n : {128, 160, 192, 224, 256, 264, 320, 384, 416, 448, 528, 832})
    for (int rep = 0; rep < 3; ++rep) {
      probe<<<dim3(1, n), 128>>>(cnt, 20000, rec);
      CK(cudaDeviceSynchronize());
      printf("deal1d,%d,%d,", n, rep);
      print_sms(n);
    }
}

int main(int argc, char** argv) {
  CK(cudaMalloc(&w1, 2ull * EMAX * F * H));
  CK(cudaMalloc(&w2, 2ull * EMAX * H * F));
  moe_init<<<1024, 256>>>(w1, (u64)EMAX * F * H, 2u);
  moe_init<<<1024, 256>>>(w2, (u64)EMAX * H * F, 3u);
  CK(cudaMalloc(&X, 4ull * TMAX * H)); CK(cudaMemset(X, 0, 4ull * TMAX * H));
  CK(cudaMalloc(&Hb, 4ull * EMAX * TMAX * F)); CK(cudaMemset(Hb, 0, 4ull * EMAX * TMAX * F));
  CK(cudaMalloc(&Y, 4ull * TMAX * H)); CK(cudaMemset(Y, 0, 4ull * TMAX * H));
  CK(cudaMalloc(&wl, 4ull * EMAX * TMAX)); CK(cudaMemset(wl, 0, 4ull * EMAX * TMAX));
  CK(cudaMalloc(&cnt, 4 * EMAX));
  CK(cudaMalloc(&lists, 4ull * EMAX * TMAX));
  CK(cudaMalloc(&rec, 8ull * 3 * 4096));
  CK(cudaDeviceSynchronize());
  if (argc > 1 && strcmp(argv[1], "deal2d") == 0) {
    deal2d_rows();
    return 0;
  }
  if (argc > 1 && strcmp(argv[1], "deal") == 0) {
    deal_rows();
    return 0;
  }
  printf("kind,kernel,E,tokens,top_k,pattern,median_us,min_us,counts\n");
  // One loaded expert: the walk alone, one CTA per SM.
  for (int E : {16, 64})
    for (int n : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}) {
      std::vector<u32> c(E, 0); c[0] = n;
      time_row("one", E, n, 1, c);
    }
  // Every expert equally loaded: how CTAs sharing an SM slow each other.
  for (int E : {4, 8, 12, 16, 17, 20, 24, 28, 32, 33, 40, 48, 52, 64, 80, 96})
    for (int n : {1, 8, 32, 128, 512}) time_row("even", E, n * E, 1, std::vector<u32>(E, n));
  // Two loaded experts, whose CTAs share SMs if CTAs are dealt in launch order (E = 20: CTA
  // e + 20 y on SM (e + 20 y) mod 132; experts 0 and 12 meet on two SMs, 0 and 1 on none).
  for (int b : {1, 12, 6, 13}) {
    std::vector<u32> c(20, 0); c[0] = 256; c[b] = 256;
    time_row(b == 1 || b == 13 ? "pair-apart" : "pair-meet", 20, 512, 1, c);
  }
  // Uniformly random routing, as the blind sets' decode batches and prefills route.
  unsigned seed = 1;
  for (int E : {12, 16, 20, 24, 28, 32, 40, 52})
    for (int k : {2, 3, 5})
      for (int T : {1, 4, 16, 48, 96, 256, 1024}) time_row("random", E, T, k, route(E, T, k, seed++));
  // Where CTAs land: every expert busy 20 us; then random loads, 1 us per token.
  for (int E : {16, 20, 24, 33, 52}) place_rows("even", E, std::vector<u32>(E, 20), 1000);
  for (int E : {16, 20, 28}) place_rows("random", E, route(E, 64, 4, 99), 1000);
  CK(cudaDeviceSynchronize());
  return 0;
}
