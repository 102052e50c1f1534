// Device code of the BF16 and F16 channels-last batchnorm rows (batchnorm_cuda.cu,
// batchnorm_phased_cuda.cu): x, y, dy, dx are (N, H, W, C) of T (bf16 or f16, half16.cuh: every
// kernel is templated on it), so a channel's values are M = N*H*W rows apart. A block is a
// tile of TG channel groups (8 channels: one 16-byte access; 1 channel on the scalar path) by TR
// rows, over one slice of the rows; grid (slices, tiles). A thread keeps its channels' double sums
// or FP32 coefficients in registers for its whole slice. The sums kernel adds the block's rows in a
// fixed tree, stores one partial per (slice, channel), and the tile's last block adds the slices in
// a fixed order and calls the same per-channel tails as the NCHW kernels (batchnorm.cuh).
// Trap: the tiling (TG, TR, slices) is a function of the shape and the path only, never of
// occupancy, and it is part of the sums: change it and the bits of every result change.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/bf16.h"
#include "ops/batchnorm.cuh"
#include "ops/half16.cuh"

namespace cnn {

// One NHWC pass's tiling (nhwc_tiling).
struct NhwcTiling {
  int64_t C;          // channels: the row length
  int M;              // rows, N * H * W
  int G;              // channel groups of the path's width: C / V
  int TG, TR;         // a block: TG groups by TR rows (TG * TR <= kThreads threads)
  int slices, tiles;  // grid (slices, tiles); tiles = ceil(G / TG)
};

// Which pass a tiling is for: the streaming passes (normalise, dx) or the sums pass, whose blocks
// each end in a reduction and whose tile's last block adds every slice's partials.
enum class NhwcPass { stream, sums };

// V = 8 (C % 8 == 0, 16-byte aligned operands) or 1. Groups spread evenly over the tiles so few
// threads idle, and slices of rows over the grid:
// - stream: up to 32 groups a tile (a warp's lanes read one contiguous run of a row), up to ~1024
//   blocks over all tiles (many loads in flight).
// - sums: up to 8 groups of 8 channels a tile (128 contiguous bytes of a row per warp row: whole
//   lines, and at least 32 rows a block so the final adds spread over many threads; 32 groups of
//   one channel on the scalar path), and at most ~264 blocks over all tiles (two a multiprocessor
//   on a 132-SM GPU): every block ends in a block reduction and the last block of a tile adds all
//   its slices' partials, so on large tensors fewer, longer slices cost less. At N=64 C=64 48x48
//   the earlier 576 slices of 8 rows a thread left the GPU 70% idle, waiting on the last block's
//   576-slice serial sum.
// Both: slices of at least 4 rows a thread (one batch of loads: small tensors, all latency, spread
// over more multiprocessors rather than waiting on several round trips to memory a thread).
template <int V>
inline NhwcTiling nhwc_tiling(const BatchnormShape& sh, NhwcPass pass = NhwcPass::stream) {
  const bool sums = pass == NhwcPass::sums;
  NhwcTiling t{};
  t.C = sh.C;
  t.M = static_cast<int>(sh.N * sh.H * sh.W);
  t.G = static_cast<int>(sh.C / V);
  const int max_groups = sums && V == 8 ? 8 : 32;
  t.tiles = (t.G + max_groups - 1) / max_groups;
  t.TG = (t.G + t.tiles - 1) / t.tiles;
  t.TR = kThreads / t.TG;
  const int64_t rows_per_slice = 4 * static_cast<int64_t>(t.TR);
  const int64_t by_size = (t.M + rows_per_slice - 1) / rows_per_slice;
  const int64_t fill = sums ? 264 : 1024;
  const int64_t by_fill = (fill + t.tiles - 1) / t.tiles;
  t.slices = static_cast<int>(std::max<int64_t>(1, std::min(by_size, by_fill)));
  return t;
}

// This thread's place in its tile: group g of the tile, row r, and its first channel c0 (valid
// when active: the last tile may have fewer groups than TG).
template <int V>
struct NhwcThread {
  int g, r, c0;
  bool active;
  __device__ __forceinline__ explicit NhwcThread(const NhwcTiling& t) {
    g = static_cast<int>(threadIdx.x) % t.TG;
    r = static_cast<int>(threadIdx.x) / t.TG;
    const int group = static_cast<int>(blockIdx.y) * t.TG + g;
    active = group < t.G;
    c0 = group * V;
  }
};

// The tile channel this thread computes a per-channel prologue for (normalise and dx passes): one
// channel a thread, threads 0 .. TG*V - 1 (a prologue may do double divisions and a square root,
// which V channels in a row would make a serial wait for the whole block). slot indexes the
// block's per-channel shared arrays, in the order NhwcThread's th.g * V + v reads them.
template <int V>
struct NhwcChannelOwner {
  int slot, c;
  bool owns;
  __device__ __forceinline__ explicit NhwcChannelOwner(const NhwcTiling& t) {
    slot = static_cast<int>(threadIdx.x);
    c = static_cast<int>(blockIdx.y) * t.TG * V + slot;
    owns = slot < t.TG * V && c < t.G * V;
  }
};

// V consecutive T (bf16 or f16) at p + i as floats (exact), and V floats rounded once into p + i.
template <typename T>
__device__ __forceinline__ void load_lanes(const T* p, int64_t i, float (&v)[8]) {
  half16_load8(p + i, v);
}
template <typename T>
__device__ __forceinline__ void load_lanes(const T* p, int64_t i, float (&v)[1]) {
  v[0] = half16_load(p, i);
}
// The same, or zeros when p is null (y without an activation, read by no epilogue).
template <int V, typename T>
__device__ __forceinline__ void load_lanes_or_zero(const T* p, int64_t i, float (&v)[V]) {
  if (p) {
    load_lanes(p, i, v);
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) v[k] = 0.0f;
  }
}
template <typename T>
__device__ __forceinline__ void store_lanes(T* p, int64_t i, const float (&v)[8]) {
  *reinterpret_cast<uint4*>(p + i) = half16_pack8<T>(v);
}
template <typename T>
__device__ __forceinline__ void store_lanes(T* p, int64_t i, const float (&v)[1]) {
  half16_store(p, i, v[0]);
}

// f(offset of the row's first channel of this thread) for each row of this block's slice: rows
// r, r + TR, ... in increasing order (the order of the sums).
template <int V, typename F>
__device__ __forceinline__ void for_rows(const NhwcTiling& t, const NhwcThread<V>& th, F&& f) {
  int begin, end;
  slice_of(t.M, begin, end);
#pragma unroll 4
  for (int m = begin + th.r; m < end; m += t.TR) f(static_cast<int64_t>(m) * t.C + th.c0);
}

// V bf16 or f16 as loaded (one 16-byte word, or one element), unpacked later: the sums pass loads a batch
// of rows into these before it adds any, so a thread has several loads in flight (the adds carry
// a dependency from row to row, and left to itself the compiler issued one row's loads at a time:
// about a fifth of the memory bandwidth).
template <int V>
struct RawLanes;
template <>
struct RawLanes<8> {
  uint4 u;
};
template <>
struct RawLanes<1> {
  uint16_t u;
};
template <typename T>
__device__ __forceinline__ void load_raw(const T* p, int64_t i, RawLanes<8>& r) {
  r.u = *reinterpret_cast<const uint4*>(p + i);
}
template <typename T>
__device__ __forceinline__ void load_raw(const T* p, int64_t i, RawLanes<1>& r) {
  r.u = reinterpret_cast<const uint16_t*>(p)[i];
}
template <typename T>
__device__ __forceinline__ void unpack_raw(const RawLanes<8>& r, float (&v)[8]) {
  half16_unpack8<T>(r.u, v);
}
template <typename T>
__device__ __forceinline__ void unpack_raw(const RawLanes<1>& r, float (&v)[1]) {
  v[0] = Half16<T>::to_float(r.u);
}

// for_rows for a sums pass: terms.load(raw, offset) for U rows, then terms.add(lanes, raw, s, q)
// for the same rows in increasing order (the order of for_rows, so the sums are the same bits).
template <int U, int V, typename Terms, typename Lanes>
__device__ __forceinline__ void sum_rows_batched(const NhwcTiling& t, const NhwcThread<V>& th, const Terms& terms,
                                                 const Lanes& lanes, double (&s)[V], double (&q)[V]) {
  int begin, end;
  slice_of(t.M, begin, end);
  int m = begin + th.r;
  for (; m + (U - 1) * t.TR < end; m += U * t.TR) {
    typename Terms::Raw raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) terms.load(raw[u], static_cast<int64_t>(m + u * t.TR) * t.C + th.c0);
#pragma unroll
    for (int u = 0; u < U; ++u) terms.add(lanes, raw[u], s, q);
  }
  for (; m < end; m += t.TR) {
    typename Terms::Raw raw;
    terms.load(raw, static_cast<int64_t>(m) * t.C + th.c0);
    terms.add(lanes, raw, s, q);
  }
}

// Sums each lane of s over the TR rows of the block's tile, in a fixed tree (rows past the
// largest power of two fold in first); row 0's threads end with the totals. Every thread of the
// block calls it. red: V * blockDim.x doubles of shared memory.
template <int V>
__device__ __forceinline__ void sum_rows(const NhwcTiling& t, const NhwcThread<V>& th, double (&s)[V], double* red) {
  const int n = t.TG * t.TR, me = static_cast<int>(threadIdx.x);
  __syncthreads();  // red is free
#pragma unroll
  for (int v = 0; v < V; ++v) red[v * n + me] = s[v];
  __syncthreads();
  // Row r adds row r + h when `take`, then the block waits.
  auto step = [&](bool take, int h) {
    if (take) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        s[v] += red[v * n + (th.r + h) * t.TG + th.g];
        red[v * n + me] = s[v];
      }
    }
    __syncthreads();
  };
  int p = 1;
  while (2 * p <= t.TR) p *= 2;
  step(th.r < t.TR - p, p);  // rows p .. TR - 1 into rows 0 .. TR - p - 1
  for (int h = p / 2; h > 0; h /= 2) step(th.r < h, h);
}

// Doubles of shared memory sum_rows_pair needs (the kernel's `red`).
template <int V>
constexpr int kSumsShared = kThreads * (V == 1 ? 2 : V);

// sum_rows of s and of q. When TG divides a warp (TG = 1, 2, 4, 8, 16 or 32: the usual shapes), a
// warp's rows are added first by shuffles (lanes l and l ^ TG*2^k hold the same group), then row 0
// adds the warps' totals in warp order: 2 barriers instead of 2 (log2 TR + 2). Either way a fixed
// tree of the shape, so the bits repeat. red: kSumsShared<V> doubles.
template <int V>
__device__ __forceinline__ void sum_rows_pair(const NhwcTiling& t, const NhwcThread<V>& th, double (&s)[V],
                                              double (&q)[V], double* red) {
  if (cuda::kWarpSize % t.TG != 0) {
    sum_rows(t, th, s, red);
    sum_rows(t, th, q, red);
    return;
  }
  for (int off = cuda::kWarpSize / 2; off >= t.TG; off >>= 1) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      s[v] += __shfl_xor_sync(0xffffffffu, s[v], off);
      q[v] += __shfl_xor_sync(0xffffffffu, q[v], off);
    }
  }
  const int lane = static_cast<int>(threadIdx.x) % cuda::kWarpSize, warp = static_cast<int>(threadIdx.x) / cuda::kWarpSize;
  const int warps = t.TG * t.TR / cuda::kWarpSize;
  __syncthreads();  // red is free
  if (lane < t.TG) {  // the warp's first row: lane == g
    double* w = red + (warp * t.TG + lane) * 2 * V;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      w[v] = s[v];
      w[V + v] = q[v];
    }
  }
  __syncthreads();
  if (th.r == 0) {  // warp 0's first row: its own totals, then warps 1, 2, ... in order
    for (int k = 1; k < warps; ++k) {
      const double* w = red + (k * t.TG + th.g) * 2 * V;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        s[v] += w[v];
        q[v] += w[V + v];
      }
    }
  }
}

// Terms of the forward sums: (d, d^2), d = x - shift(c).
template <int V, typename Shift, typename T>
struct ShiftedTerms {
  const T* __restrict__ x;  // (N, H, W, C)
  Shift shift;
  struct Lanes {
    float k[V];  // exact: the shift is a float, bf16 or f16 value (half the registers of a double)
  };
  __device__ __forceinline__ Lanes begin(int c0) const {
    Lanes l;
#pragma unroll
    for (int v = 0; v < V; ++v) l.k[v] = static_cast<float>(shift(c0 + v));
    return l;
  }
  static constexpr int kBatch = 4;  // rows a thread loads before adding (sum_rows_batched)
  struct Raw {
    RawLanes<V> x;
  };
  __device__ __forceinline__ void load(Raw& r, int64_t at) const { load_raw(x, at, r.x); }
  __device__ __forceinline__ void add(const Lanes& l, const Raw& r, double (&s)[V], double (&t)[V]) const {
    float xv[V];
    unpack_raw<T>(r.x, xv);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const double d = static_cast<double>(xv[v]) - static_cast<double>(l.k[v]);
      s[v] += d;
      t[v] += d * d;
    }
  }
};

// Terms of the backward sums: (g, g (x - mean)), g = epi'(y) dy (y read only when non-null), the
// products as batchnorm_backward_stats_act_kernel forms them.
template <int V, typename Epi, typename T>
struct GradTerms {
  Epi epi;
  const T* __restrict__ x;             // (N, H, W, C)
  const T* __restrict__ y;             // (N, H, W, C) or null
  const T* __restrict__ dy;            // (N, H, W, C)
  const float* __restrict__ save_mean; // (C)
  struct Lanes {
    float mean[V];
  };
  __device__ __forceinline__ Lanes begin(int c0) const {
    Lanes l;
#pragma unroll
    for (int v = 0; v < V; ++v) l.mean[v] = save_mean[c0 + v];
    return l;
  }
  static constexpr int kBatch = 2;  // rows a thread loads before adding (sum_rows_batched)
  struct Raw {
    RawLanes<V> x, dy, y;  // y unread (and unpacked as zeros) when the pointer is null
  };
  __device__ __forceinline__ void load(Raw& r, int64_t at) const {
    load_raw(x, at, r.x);
    load_raw(dy, at, r.dy);
    if (y) load_raw(y, at, r.y);
  }
  __device__ __forceinline__ void add(const Lanes& l, const Raw& r, double (&s)[V], double (&t)[V]) const {
    float xv[V], yv[V], dyv[V];
    unpack_raw<T>(r.x, xv);
    unpack_raw<T>(r.dy, dyv);
    if (y) {
      unpack_raw<T>(r.y, yv);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) yv[v] = 0.0f;
    }
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const double g = epi.grad(yv[v], dyv[v]);
      s[v] += g;
      t[v] += g * static_cast<double>(xv[v] - l.mean[v]);
    }
  }
};

// grid (slices, tiles): per-channel sums of terms' two values over the rows. Each block stores its
// (slice, channel) pairs into partial (slices, 2, C); the tile's last block adds them in a fixed
// order (two slices' loads in flight a thread) and calls tail(c, first sum, second sum) once per
// channel of the tile. Tiling: nhwc_tiling(sh, NhwcPass::sums). Two blocks a multiprocessor is all
// that tiling asks for, so up to 128 registers a thread (no spills).
template <int V, typename Terms, typename Tail>
static __global__ void __launch_bounds__(kThreads, 2) batchnorm_sums_nhwc_kernel(NhwcTiling t, Terms terms,
                                                  double* __restrict__ partial,     // (slices, 2, C)
                                                  unsigned* __restrict__ counters,  // (tiles), zero
                                                  Tail tail) {
  __shared__ double red[kSumsShared<V>];
  const NhwcThread<V> th(t);
  double s[V], q[V];
#pragma unroll
  for (int v = 0; v < V; ++v) s[v] = q[v] = 0.0;
  if (th.active) {
    const typename Terms::Lanes lanes = terms.begin(th.c0);
    sum_rows_batched<Terms::kBatch>(t, th, terms, lanes, s, q);
  }
  sum_rows_pair(t, th, s, q, red);
  const int64_t C = t.C;
  if (th.r == 0 && th.active) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      partial[(2 * static_cast<int64_t>(blockIdx.x)) * C + th.c0 + v] = s[v];
      partial[(2 * static_cast<int64_t>(blockIdx.x) + 1) * C + th.c0 + v] = q[v];
    }
  }
  if (!cuda::arrive_last(counters + blockIdx.y, gridDim.x)) return;
#pragma unroll
  for (int v = 0; v < V; ++v) s[v] = q[v] = 0.0;
  if (th.active) {
    const int slices = static_cast<int>(gridDim.x);
    auto at = [&](int b, int k) { return partial + (2 * static_cast<int64_t>(b) + k) * C + th.c0; };
    int b = th.r;
    for (; b + t.TR < slices; b += 2 * t.TR) {  // slices b and b + TR: loads first, adds in order
      double s0[V], q0[V], s1[V], q1[V];
#pragma unroll
      for (int v = 0; v < V; ++v) {
        s0[v] = __ldcg(at(b, 0) + v);
        q0[v] = __ldcg(at(b, 1) + v);
        s1[v] = __ldcg(at(b + t.TR, 0) + v);
        q1[v] = __ldcg(at(b + t.TR, 1) + v);
      }
#pragma unroll
      for (int v = 0; v < V; ++v) {
        s[v] = s[v] + s0[v] + s1[v];
        q[v] = q[v] + q0[v] + q1[v];
      }
    }
    if (b < slices) {
#pragma unroll
      for (int v = 0; v < V; ++v) {
        s[v] += __ldcg(at(b, 0) + v);
        q[v] += __ldcg(at(b, 1) + v);
      }
    }
  }
  sum_rows_pair(t, th, s, q, red);
  if (th.r == 0 && th.active) {
#pragma unroll
    for (int v = 0; v < V; ++v) tail(th.c0 + v, s[v], q[v]);
  }
}

// grid (slices, tiles): y = epi((x - m) k + beta[c]) with each channel's (m, k) from
// pro.begin(c, m, k) (one channel a thread, NhwcChannelOwner, into shared memory). With counters, the tile's last block
// then calls pro.finish(c) for each of its channels (after pro.begin again, which a finish may need:
// every block has read what begin reads by then). M = 0 touches no x or y.
template <int V, typename Epi, typename Pro, typename T>
static __global__ void batchnorm_normalize_nhwc_kernel(NhwcTiling t, Epi epi, Pro pro,
                                                       const T* __restrict__ x,          // (N, H, W, C)
                                                       const float* __restrict__ beta,   // (C)
                                                       T* __restrict__ y,                // (N, H, W, C)
                                                       unsigned* __restrict__ counters)  // (tiles), zero; or null
{
  __shared__ float norm[2][kThreads];
  const NhwcThread<V> th(t);
  const int at = th.g * V;
  const NhwcChannelOwner<V> own(t);
  if (own.owns) pro.begin(own.c, norm[0][own.slot], norm[1][own.slot]);
  __syncthreads();
  if (th.active) {
    float m[V], k[V], b[V];
#pragma unroll
    for (int v = 0; v < V; ++v) {
      m[v] = norm[0][at + v];
      k[v] = norm[1][at + v];
      b[v] = beta[th.c0 + v];
    }
    for_rows(t, th, [&](int64_t i) {
      float e[V];
      load_lanes(x, i, e);
#pragma unroll
      for (int v = 0; v < V; ++v) e[v] = epi.forward((e[v] - m[v]) * k[v] + b[v]);
      store_lanes(y, i, e);
    });
  }
  if (counters && cuda::arrive_last(counters + blockIdx.y, gridDim.x) && own.owns) {
    float m, k;
    pro.begin(own.c, m, k);
    pro.finish(own.c);
  }
}

// grid (slices, tiles): dx = a (g - b - (x - save_mean[c]) k), g = epi'(y) dy (y read only when
// non-null), each channel's (a, b, k) from coef(c, abk) (one channel a thread, NhwcChannelOwner,
// into shared memory).
template <int V, typename Epi, typename Coef, typename T>
static __global__ void batchnorm_dx_nhwc_kernel(NhwcTiling t, Epi epi, Coef coef,
                                                const float* __restrict__ save_mean,  // (C)
                                                const T* __restrict__ x,              // (N, H, W, C)
                                                const T* __restrict__ y,              // (N, H, W, C) or null
                                                const T* __restrict__ dy,             // (N, H, W, C)
                                                T* __restrict__ dx) {                 // (N, H, W, C)
  __shared__ float abkm[4][kThreads];
  const NhwcThread<V> th(t);
  const int at = th.g * V;
  const NhwcChannelOwner<V> own(t);
  if (own.owns) {
    float abk[3];
    coef(own.c, abk);
    abkm[0][own.slot] = abk[0];
    abkm[1][own.slot] = abk[1];
    abkm[2][own.slot] = abk[2];
    abkm[3][own.slot] = save_mean[own.c];
  }
  __syncthreads();
  if (!th.active) return;
  float a[V], b[V], k[V], m[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
    a[v] = abkm[0][at + v];
    b[v] = abkm[1][at + v];
    k[v] = abkm[2][at + v];
    m[v] = abkm[3][at + v];
  }
  for_rows(t, th, [&](int64_t i) {
    float xv[V], yv[V], e[V];
    load_lanes(x, i, xv);
    load_lanes(dy, i, e);
    load_lanes_or_zero(y, i, yv);
#pragma unroll
    for (int v = 0; v < V; ++v) e[v] = a[v] * (epi.grad(yv[v], e[v]) - b[v] - (xv[v] - m[v]) * k[v]);
    store_lanes(dx, i, e);
  });
}

// Whether the 16-byte path applies: whole groups of 8 channels and every operand (null or)
// 16-byte aligned.
inline bool nhwc_vectorized(const BatchnormShape& sh, std::initializer_list<const void*> operands) {
  if (sh.C % 8 != 0) return false;
  for (const void* p : operands)
    if (!cuda::aligned16(p)) return false;
  return true;
}

// launch(tiling, grid, block, width tag) on the 16-byte path (std::integral_constant<int, 8>) when
// `vec`, else on the scalar path (<int, 1>).
template <typename F>
static void per_nhwc_tile(const BatchnormShape& sh, bool vec, F&& launch, NhwcPass pass = NhwcPass::stream) {
  auto go = [&](auto width) {
    const NhwcTiling t = nhwc_tiling<decltype(width)::value>(sh, pass);
    launch(t, dim3(static_cast<unsigned>(t.slices), static_cast<unsigned>(t.tiles)),
           dim3(static_cast<unsigned>(t.TG * t.TR)), width);
  };
  if (vec)
    go(std::integral_constant<int, 8>{});
  else
    go(std::integral_constant<int, 1>{});
}

// The sums pass on `stream` (batchnorm_sums_nhwc_kernel) with make_terms(width tag)'s terms
// and make_tail(scratch)'s tail; the scratch holds the partials and then `floats` per-channel floats
// (which the tail may write for a later pass): returned.
template <typename MakeTerms, typename MakeTail>
static Scratch launch_sums_nhwc(const ExecContext& ctx, cudaStream_t stream, const BatchnormShape& sh, bool vec,
                                int64_t floats, const char* what, MakeTerms&& make_terms, MakeTail&& make_tail) {
  unsigned* counters = channel_counters(ctx, sh, what);
  Scratch s{};
  per_nhwc_tile(
      sh, vec,
      [&](const NhwcTiling& t, dim3 grid, dim3 block, auto width) {
        s = scratch(ctx, sh, t.slices, floats, what);
        batchnorm_sums_nhwc_kernel<decltype(width)::value>
            <<<grid, block, 0, stream>>>(t, make_terms(width), s.partial, counters, make_tail(s));
      },
      NhwcPass::sums);
  return s;
}

// The normalise pass on `stream` (batchnorm_normalize_nhwc_kernel) with act's epilogue (null:
// none); counters (or null) as the kernel takes them.
template <typename Pro, typename T>
static void launch_normalize_nhwc(cudaStream_t stream, const BatchnormShape& sh, const ActivationParams* act,
                                  const Pro& pro, const T* x, const float* beta, T* y, unsigned* counters) {
  with_epilogue(act, [&](auto epi) {
    per_nhwc_tile(sh, nhwc_vectorized(sh, {x, y}), [&](const NhwcTiling& t, dim3 grid, dim3 block, auto width) {
      batchnorm_normalize_nhwc_kernel<decltype(width)::value>
          <<<grid, block, 0, stream>>>(t, epi, pro, x, beta, y, counters);
    });
  });
}

// The dx pass on `stream` (batchnorm_dx_nhwc_kernel) with act's derivative (null: none; y is
// then not read).
template <typename Coef, typename T>
static void launch_dx_nhwc(cudaStream_t stream, const BatchnormShape& sh, const ActivationParams* act,
                           const Coef& coef, const float* save_mean, const T* x, const T* y, const T* dy, T* dx) {
  const T* y_read = act ? y : nullptr;
  with_epilogue(act, [&](auto epi) {
    per_nhwc_tile(sh, nhwc_vectorized(sh, {x, y_read, dy, dx}),
                  [&](const NhwcTiling& t, dim3 grid, dim3 block, auto width) {
                    batchnorm_dx_nhwc_kernel<decltype(width)::value>
                        <<<grid, block, 0, stream>>>(t, epi, coef, save_mean, x, y_read, dy, dx);
                  });
  });
}

}  // namespace cnn
