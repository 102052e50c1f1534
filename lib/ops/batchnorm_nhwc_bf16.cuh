// Device code of the BF16, F16 and F32CL channels-last batchnorm rows (batchnorm_cuda.cu,
// batchnorm_phased_cuda.cu): x, y, dy, dx are (N, H, W, C) of T (bf16, f16 or float for f32cl,
// half16.cuh: every kernel is templated on it), so a channel's values are M = N*H*W rows apart. A
// block is a tile of TG channel groups (8 channels: one 16-byte access of bf16/f16, two of float;
// 1 channel on the scalar path) by TR rows, over one slice of the rows; grid (slices, tiles). A
// thread keeps its channels' FP32 sums or FP32 coefficients in registers for its whole slice. The
// sums kernel widens each thread's sums to double, adds the block's rows in a fixed tree, stores
// one double partial per (slice, channel), and the tile's last block adds the slices in a fixed
// order and calls the same per-channel tails as the NCHW kernels (batchnorm.cuh). Why FP32 within
// a thread: a thread's slice is at most a few hundred rows (error ~ sqrt(rows) ulps of FP32, far
// below the bf16/f16 inputs' own rounding, though not below float inputs': f32cl results are not
// bitwise the NCHW f32 kernels', which sum in double), and double arithmetic ran at 1/2 (adds) and
// 1/8 (conversions) of FP32's rate: at vgg_fer's sizes the double sums passes ran at 2.0-2.5 TB/s,
// bound by the conversions, not by memory.
// Trap: the tiling (TG, TR, slices) is a function of the shape and the path only, never of
// occupancy or T, and it is part of the sums: change it and the bits of every result change.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

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

// V = 8 (C % 8 == 0, 16-byte aligned operands: a group starts at a multiple of 8 elements, 16 or
// 32 bytes, so its one or two 16-byte accesses are aligned) or 1. Groups spread evenly over the
// tiles so few threads idle, and slices of rows over the grid:
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
  const int64_t fill = sums ? cuda::kFillBlocks : 1024;
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

// V floats rounded once into V consecutive T at p + i (float: stored as they are).
// Trap: half16_store8(p + i, v) stores the same bits for bf16 too, but forms the address before the
// packing, which reorders the bf16 kernels' PTX; the 16-bit types keep the packing first.
template <typename T>
__device__ __forceinline__ void store_lanes(T* p, int64_t i, const float (&v)[8]) {
  if constexpr (std::is_same_v<T, float>)
    half16_store8(p + i, v);
  else
    *reinterpret_cast<uint4*>(p + i) = half16_pack8<T>(v);
}
template <typename T>
__device__ __forceinline__ void store_lanes(T* p, int64_t i, const float (&v)[1]) {
  half16_store(p, i, v[0]);
}

// V elements of T as loaded (half16.cuh's Raw8<T>: one 16-byte word of bf16/f16, two of float; or
// Raw1<T>: one element), unpacked later: for_rows_batched holds several rows of these in flight
// before it uses any.
template <int V, typename T>
using RawLanes = std::conditional_t<V == 8, Raw8<T>, Raw1<T>>;
template <typename T>
__device__ __forceinline__ void load_raw(const T* p, int64_t i, Raw8<T>& r) {
  load_raw8(p + i, r);
}
template <typename T>
__device__ __forceinline__ void load_raw(const T* p, int64_t i, Raw1<T>& r) {
  load_raw1(p, i, r);
}
template <typename T>
__device__ __forceinline__ void unpack_raw(const Raw8<T>& r, float (&v)[8]) {
  unpack_raw8<T>(r, v);
}
template <typename T>
__device__ __forceinline__ void unpack_raw(const Raw1<T>& r, float (&v)[1]) {
  v[0] = unpack_raw1<T>(r);
}

// One row's x, dy and y of a backward pass as loaded (y when non-null; unpacked as zeros when
// not read: no activation), for GradTerms, batchnorm_dx_nhwc_kernel and DxOut.
template <int V, typename T>
struct GradRaw {
  RawLanes<V, T> x, dy, y;
  __device__ __forceinline__ void load(const T* xp, const T* dyp, const T* yp, int64_t at) {
    load_raw(xp, at, x);
    load_raw(dyp, at, dy);
    if (yp) load_raw(yp, at, y);
  }
  __device__ __forceinline__ void unpack(bool read_y, float (&xv)[V], float (&dyv)[V], float (&yv)[V]) const {
    unpack_raw<T>(x, xv);
    unpack_raw<T>(dy, dyv);
    if (read_y) {
      unpack_raw<T>(y, yv);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) yv[v] = 0.0f;
    }
  }
};

// The rows of this thread in its block's slice, r, r + TR, ... (offset of the row's first channel
// of this thread), U at a time: load(raw, offset) for U rows, then use(raw, offset) for the same
// rows in increasing order (the sums' order), so a thread has U rows' loads in flight. Left to
// itself the compiler issued one row's loads at a time, each row's work depending on the last:
// about a fifth of the memory bandwidth in the sums pass.
template <int U, typename Raw, int V, typename Load, typename Use>
__device__ __forceinline__ void for_rows_batched(const NhwcTiling& t, const NhwcThread<V>& th, Load&& load,
                                                 Use&& use) {
  int begin, end;
  slice_of(t.M, begin, end);
  int m = begin + th.r;
  for (; m + (U - 1) * t.TR < end; m += U * t.TR) {
    Raw raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) load(raw[u], static_cast<int64_t>(m + u * t.TR) * t.C + th.c0);
#pragma unroll
    for (int u = 0; u < U; ++u) use(raw[u], static_cast<int64_t>(m + u * t.TR) * t.C + th.c0);
  }
  for (; m < end; m += t.TR) {
    Raw raw;
    const int64_t i = static_cast<int64_t>(m) * t.C + th.c0;
    load(raw, i);
    use(raw, i);
  }
}

// A sums pass's rows: terms.load then terms.add(lanes, raw, s, q) for each row of the slice,
// Terms::kBatch rows at a time (for_rows_batched), into this thread's FP32 sums.
template <int V, typename Terms, typename Lanes>
__device__ __forceinline__ void sum_rows_batched(const NhwcTiling& t, const NhwcThread<V>& th, const Terms& terms,
                                                 const Lanes& lanes, float (&s)[V], float (&q)[V]) {
  for_rows_batched<Terms::kBatch, typename Terms::Raw>(
      t, th, [&](typename Terms::Raw& raw, int64_t i) { terms.load(raw, i); },
      [&](const typename Terms::Raw& raw, int64_t) { terms.add(lanes, raw, s, q); });
}

// A thread's FP32 sums widened to double (exact) for the block's tree and the slices' adds.
template <int V>
__device__ __forceinline__ void widen_sums(const float (&sf)[V], const float (&qf)[V], double (&s)[V],
                                          double (&q)[V]) {
#pragma unroll
  for (int v = 0; v < V; ++v) {
    s[v] = static_cast<double>(sf[v]);
    q[v] = static_cast<double>(qf[v]);
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

// Terms of the forward sums: (d, d^2), d = x - shift(c), in FP32 (fma for d^2).
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
  static constexpr int kBatch = 8;  // rows a thread loads before adding (sum_rows_batched)
  struct Raw {
    RawLanes<V, T> x;
  };
  __device__ __forceinline__ void load(Raw& r, int64_t at) const { load_raw(x, at, r.x); }
  __device__ __forceinline__ void add(const Lanes& l, const Raw& r, float (&s)[V], float (&t)[V]) const {
    float xv[V];
    unpack_raw<T>(r.x, xv);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float d = __fsub_rn(xv[v], l.k[v]);
      s[v] = __fadd_rn(s[v], d);
      t[v] = __fmaf_rn(d, d, t[v]);
    }
  }
};

// The per-channel operands of z in a GradFromZ backward (batchnorm.h: "A sign-only activation's
// derivative"): the forward's scale, formed again from gamma and save_inv_std, and beta.
struct PreActivation {
  const float* __restrict__ gamma;         // (C)
  const float* __restrict__ save_inv_std;  // (C)
  const float* __restrict__ beta;          // (C)
  __device__ __forceinline__ void at(int c, float& scale, float& b) const {
    scale = batchnorm_saved_scale(gamma[c], save_inv_std[c]);
    b = beta[c];
  }
};

// The input of epi's grad for one element: z = batchnorm_pre_activation(x, ...) for GradFromZ
// (y not read), else y.
template <typename Epi>
__device__ __forceinline__ float grad_input(float x, float y, float mean, float scale, float beta) {
  if constexpr (kGradFromZ<Epi>)
    return batchnorm_pre_activation(x, mean, scale, beta);
  else
    return y;
}

// Terms of the backward sums: (g, g (x - mean)), g = epi'(y) dy (y read only when non-null; for
// GradFromZ, epi'(z) dy with z from x and `pre`), in FP32 (fma for the product).
template <int V, typename Epi, typename T>
struct GradTerms {
  Epi epi;
  const T* __restrict__ x;             // (N, H, W, C)
  const T* __restrict__ y;             // (N, H, W, C) or null
  const T* __restrict__ dy;            // (N, H, W, C)
  const float* __restrict__ save_mean; // (C)
  PreActivation pre{};                 // read for GradFromZ only
  struct Lanes {
    float mean[V], scale[V], beta[V];  // scale, beta: GradFromZ only
  };
  __device__ __forceinline__ Lanes begin(int c0) const {
    Lanes l;
#pragma unroll
    for (int v = 0; v < V; ++v) {
      l.mean[v] = save_mean[c0 + v];
      if constexpr (kGradFromZ<Epi>) pre.at(c0 + v, l.scale[v], l.beta[v]);
    }
    return l;
  }
  // Rows a thread loads before adding (sum_rows_batched): for float half the rows, the same bytes in
  // flight (at 4 rows, float x, dy and y spilled at batchnorm_sums_nhwc_kernel's 128 registers).
  // The rows are added in the same order whatever the batch.
  static constexpr int kBatch = std::is_same_v<T, float> ? 2 : 4;
  using Raw = GradRaw<V, T>;
  __device__ __forceinline__ void load(Raw& r, int64_t at) const { r.load(x, dy, y, at); }
  __device__ __forceinline__ void add(const Lanes& l, const Raw& r, float (&s)[V], float (&t)[V]) const {
    float xv[V], yv[V], dyv[V];
    r.unpack(y != nullptr, xv, dyv, yv);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float g = epi.grad(grad_input<Epi>(xv[v], yv[v], l.mean[v], l.scale[v], l.beta[v]), dyv[v]);
      s[v] = __fadd_rn(s[v], g);
      t[v] = __fmaf_rn(g, __fsub_rn(xv[v], l.mean[v]), t[v]);
    }
  }
};

// Sets s, q to this thread's share of the sums of the `slices` (first, second) pairs of partial
// (slices, 2, C) of its channels: slices r, r + TR, ... added in a fixed order (two slices' loads
// in flight a thread), for sum_rows_pair to finish. Loads bypass L1: other blocks stored them.
template <int V>
__device__ __forceinline__ void add_slice_partials(const NhwcTiling& t, const NhwcThread<V>& th,
                                                   const double* __restrict__ partial, int slices, double (&s)[V],
                                                   double (&q)[V]) {
#pragma unroll
  for (int v = 0; v < V; ++v) s[v] = q[v] = 0.0;
  if (!th.active) return;
  const int64_t C = t.C;
  // The V doubles at partial's (slice b, k), 16 bytes a load where V is even (c0 and C are then
  // multiples of 8: aligned).
  auto load = [&](int b, int k, double (&d)[V]) {
    const double* p = partial + (2 * static_cast<int64_t>(b) + k) * C + th.c0;
    if constexpr (V % 2 == 0) {
#pragma unroll
      for (int v = 0; v < V; v += 2) {
        const double2 w = __ldcg(reinterpret_cast<const double2*>(p + v));
        d[v] = w.x;
        d[v + 1] = w.y;
      }
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) d[v] = __ldcg(p + v);
    }
  };
  int b = th.r;
  for (; b + t.TR < slices; b += 2 * t.TR) {  // slices b and b + TR: loads first, adds in order
    double s0[V], q0[V], s1[V], q1[V];
    load(b, 0, s0);
    load(b, 1, q0);
    load(b + t.TR, 0, s1);
    load(b + t.TR, 1, q1);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      s[v] = s[v] + s0[v] + s1[v];
      q[v] = q[v] + q0[v] + q1[v];
    }
  }
  if (b < slices) {
    double s0[V], q0[V];
    load(b, 0, s0);
    load(b, 1, q0);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      s[v] += s0[v];
      q[v] += q0[v];
    }
  }
}

// Stores a block's sums (row 0 of its tile, after sum_rows_pair) as slice blockIdx.x's pairs of
// partial (slices, 2, C).
template <int V>
__device__ __forceinline__ void store_slice_partials(const NhwcTiling& t, const NhwcThread<V>& th,
                                                     double* __restrict__ partial, const double (&s)[V],
                                                     const double (&q)[V]) {
  if (th.r != 0 || !th.active) return;
  const int64_t C = t.C;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    partial[(2 * static_cast<int64_t>(blockIdx.x)) * C + th.c0 + v] = s[v];
    partial[(2 * static_cast<int64_t>(blockIdx.x) + 1) * C + th.c0 + v] = q[v];
  }
}

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
  float sf[V], qf[V];
#pragma unroll
  for (int v = 0; v < V; ++v) sf[v] = qf[v] = 0.0f;
  if (th.active) {
    const typename Terms::Lanes lanes = terms.begin(th.c0);
    sum_rows_batched(t, th, terms, lanes, sf, qf);
  }
  double s[V], q[V];
  widen_sums(sf, qf, s, q);
  sum_rows_pair(t, th, s, q, red);
  store_slice_partials(t, th, partial, s, q);
  if (!cuda::arrive_last(counters + blockIdx.y, gridDim.x)) return;
  add_slice_partials(t, th, partial, static_cast<int>(gridDim.x), s, q);
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
    for_rows_batched<4, RawLanes<V, T>>(
        t, th, [&](RawLanes<V, T>& raw, int64_t i) { load_raw(x, i, raw); },
        [&](const RawLanes<V, T>& raw, int64_t i) {
          float e[V];
          unpack_raw<T>(raw, e);
#pragma unroll
          for (int v = 0; v < V; ++v) e[v] = epi.forward(batchnorm_pre_activation(e[v], m[v], k[v], b[v]));
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
// non-null; for GradFromZ epi'(z) dy, z from x and pre), each channel's (a, b, k) from coef(c, abk)
// (one channel a thread, NhwcChannelOwner, into shared memory).
template <int V, typename Epi, typename Coef, typename T>
static __global__ void batchnorm_dx_nhwc_kernel(NhwcTiling t, Epi epi, Coef coef,
                                                const float* __restrict__ save_mean,  // (C)
                                                const T* __restrict__ x,              // (N, H, W, C)
                                                const T* __restrict__ y,              // (N, H, W, C) or null
                                                const T* __restrict__ dy,             // (N, H, W, C)
                                                T* __restrict__ dx,                   // (N, H, W, C)
                                                PreActivation pre) {                  // GradFromZ only
  __shared__ float abkm[kGradFromZ<Epi> ? 6 : 4][kThreads];
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
    if constexpr (kGradFromZ<Epi>) pre.at(own.c, abkm[4][own.slot], abkm[5][own.slot]);
  }
  __syncthreads();
  if (!th.active) return;
  float a[V], b[V], k[V], m[V], zs[V], zb[V];  // zs, zb: z's scale and beta (GradFromZ)
#pragma unroll
  for (int v = 0; v < V; ++v) {
    a[v] = abkm[0][at + v];
    b[v] = abkm[1][at + v];
    k[v] = abkm[2][at + v];
    m[v] = abkm[3][at + v];
    if constexpr (kGradFromZ<Epi>) {
      zs[v] = abkm[4][at + v];
      zb[v] = abkm[5][at + v];
    }
  }
  for_rows_batched<4, GradRaw<V, T>>(
      t, th, [&](GradRaw<V, T>& r, int64_t i) { r.load(x, dy, y, i); },
      [&](const GradRaw<V, T>& r, int64_t i) {
        float xv[V], yv[V], e[V];
        r.unpack(y != nullptr, xv, e, yv);
#pragma unroll
        for (int v = 0; v < V; ++v)
          e[v] = a[v] *
                 (epi.grad(grad_input<Epi>(xv[v], yv[v], m[v], zs[v], zb[v]), e[v]) - b[v] - (xv[v] - m[v]) * k[v]);
        store_lanes(dx, i, e);
      });
}

// Whether the 16-byte path (V = 8) applies: whole groups of 8 channels and every operand (null or)
// 16-byte aligned, which for float too makes every group's two 16-byte accesses aligned.
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
// then not read), from z (GradFromZ: y not read) where `pre` has beta and act is sign-only.
template <typename Coef, typename T>
static void launch_dx_nhwc(cudaStream_t stream, const BatchnormShape& sh, const ActivationParams* act,
                           const Coef& coef, const float* save_mean, const T* x, const T* y, const T* dy, T* dx,
                           const PreActivation& pre) {
  const bool from_z = batchnorm_grad_from_z(act, pre.gamma, pre.beta);
  const T* y_read = act && !from_z ? y : nullptr;
  with_grad_epilogue(act, from_z, [&](auto epi) {
    per_nhwc_tile(sh, nhwc_vectorized(sh, {x, y_read, dy, dx}),
                  [&](const NhwcTiling& t, dim3 grid, dim3 block, auto width) {
                    batchnorm_dx_nhwc_kernel<decltype(width)::value>
                        <<<grid, block, 0, stream>>>(t, epi, coef, save_mean, x, y_read, dy, dx, pre);
                  });
  });
}

// ---- One kernel a direction (small tensors) ----
// The two-kernel path above is a sums pass then an elementwise pass: x (x and dy) read twice and
// two launches, each of about 7 us at mini_xception's sizes at batch 32 (0.1 to 2 MB: latency,
// not bytes). The one-kernel path is one cooperative grid: each block loads its slice of rows of
// its tile once into registers (kHeldRows a thread), adds its sums (terms.add, in row order, then
// sum_rows_pair's fixed tree), stores them as its slice's partials, waits at a grid-wide barrier,
// adds every slice's partials of its tile (add_slice_partials: the same fixed order in every
// block, so every block derives the same per-channel coefficients, bit for bit), and writes y
// (dx) once from the values it holds. The block of slice 0 of each tile writes the per-channel
// outputs (running and saved statistics, dgamma, dbeta, the phased ops' sums). Same arithmetic as
// the two-kernel path (FP32 sums a thread, double across threads, FP32 coefficients, each output
// rounded once); only the slicing of the sums differs, so results agree to the rounding of the
// threads' FP32 sums.
// Co-residency: a grid barrier needs every block resident at once. The launch is cooperative
// (cudaLaunchAttributeCooperative), for which the runtime checks that the grid fits the device at
// once and refuses it otherwise (cudaErrorCooperativeLaunchTooLarge) instead of letting it hang;
// cooperative_capacity asks the same question first (blocks a multiprocessor holds, from the
// kernel's registers and shared memory, times the multiprocessors) and the default rows take the
// two-kernel path when the grid would not fit. Under stream capture the launch becomes a
// cooperative kernel node (the attribute is valid for graph nodes), which keeps the guarantee
// at every replay. The grid is at most kOneKernelBlocks blocks of kThreads threads with
// __launch_bounds__(kThreads, 1): one block a multiprocessor is all it needs (132 on an H200).
// Trap: the tiling (nhwc_one_kernel_tiling) is a function of the shape only, never of the device:
// the device only decides whether the path runs.

// Rows a thread holds: 8 groups of 8 channels (16 bytes each of bf16/f16, 32 of float) or 32 single
// values (the scalar path).
template <int V>
constexpr int kHeldRows = V == 8 ? 8 : 32;
// Most blocks of a one-kernel grid (co-resident on a GPU of at least 128 multiprocessors).
constexpr int kOneKernelBlocks = 128;
// Most channels of a tile (nhwc_tiling's sums pass: 8 groups of 8, or 32 of 1).
constexpr int kTileChannels = 64;

// The one-kernel path's tiling: the sums pass's tiles (TG groups by TR rows), and slices of at
// most kHeldRows<V> * TR rows (slice_of's split), about 2 sqrt(M) rows each: a block loads TR R
// words of each operand a channel group and, after the barrier, adds `slices` partial pairs a
// channel, and rows ~ 2 sqrt(M) balances the two (both about equally slow a byte from L2), with
// more rows a slice where the grid would exceed kOneKernelBlocks. False when even kHeldRows rows a
// thread need more blocks (or the shape exceeds the kernels' index limits).
template <int V>
inline bool nhwc_one_kernel_tiling(const BatchnormShape& sh, NhwcTiling& t) {
  if (sh.N <= 0 || sh.C <= 0 || sh.C > 65535 || sh.C % V != 0 || !cuda::fits_int32(sh.N * sh.H * sh.W))
    return false;
  t = nhwc_tiling<V>(sh, NhwcPass::sums);
  const int64_t M = t.M, TR = t.TR;
  auto slices_at = [&](int64_t R) { return (M + TR * R - 1) / (TR * R); };
  const int64_t target = static_cast<int64_t>(2.0 * std::sqrt(static_cast<double>(M)));
  int64_t R = std::clamp<int64_t>((target + TR - 1) / TR, 1, kHeldRows<V>);
  while (R < kHeldRows<V> && slices_at(R) * t.tiles > kOneKernelBlocks) ++R;
  if (slices_at(R) * t.tiles > kOneKernelBlocks) return false;
  t.slices = static_cast<int>(slices_at(R));
  return true;
}

// Whether the one-kernel path's tiling takes the shape on both widths it may run (the scalar one
// whenever an operand is misaligned): the shape question of the rows forced onto it.
inline bool nhwc_one_kernel_fits(const BatchnormShape& sh) {
  NhwcTiling t;
  return nhwc_one_kernel_tiling<1>(sh, t) && (sh.C % 8 != 0 || nhwc_one_kernel_tiling<8>(sh, t));
}

// Which path a channels-last training call takes: the default (one kernel where it fits, unless
// CNN_BATCHNORM_KERNELS=two), or one forced by a named row ("cuda:one_kernel", "cuda:two_kernels").
enum class NhwcPath { automatic, one, two };

// CNN_BATCHNORM_KERNELS=two in the environment: the default rows take the two-kernel path always
// (to time it against the one-kernel path in one benchmark run; `one` or unset: the default).
// Read once a process.
inline NhwcPath default_nhwc_path() {
  static const NhwcPath path = [] {
    const char* v = std::getenv("CNN_BATCHNORM_KERNELS");
    if (!v || !*v || std::strcmp(v, "one") == 0) return NhwcPath::automatic;
    if (std::strcmp(v, "two") == 0) return NhwcPath::two;
    CNN_THROW("batchnorm: CNN_BATCHNORM_KERNELS must be one or two, got '{}'", v);
  }();
  return path;
}

// The most blocks of `kernel` at kThreads threads the current device holds at once (the limit of
// a cooperative launch), 0 where it cannot launch cooperatively. Asked once a kernel and device.
inline int64_t cooperative_capacity(const void* kernel) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, int64_t> known;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = known.find({kernel, device});
  if (it != known.end()) return it->second;
  int cooperative = 0, sms = 0, per_sm = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
  return known[{kernel, device}] = cooperative ? int64_t{sms} * per_sm : 0;
}

// Whether the device holds `blocks` blocks of `kernel` at once (cooperative_capacity); where it
// does not, a forced path (NhwcPath::one) throws and the others return false (two kernels).
inline bool cooperative_grid_fits(const void* kernel, int64_t blocks, NhwcPath path, const char* what) {
  const int64_t capacity = cooperative_capacity(kernel);
  if (blocks <= capacity) return true;
  if (path == NhwcPath::one)
    CNN_THROW("{}: the one-kernel path's {} blocks do not fit this GPU at once (it holds {})", what, blocks, capacity);
  return false;
}

// Launches kernel(args...) on grid x block threads of `stream` as one cooperative grid.
template <typename... KArgs, typename... Args>
static void launch_cooperative(void (*kernel)(KArgs...), dim3 grid, dim3 block, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

// grid (slices, tiles), cooperative: the whole of one direction (see above). terms: ShiftedTerms
// or GradTerms (load, add). stat.before(c), read before the barrier by the thread owning channel c
// (NhwcChannelOwner): the forward's shift; stat(c, sum, sum, before, owner, cf) after it: the
// channel's Stat::kCoefs output coefficients cf, and with `owner` (the block of slice 0) its
// per-channel outputs. out(raw, offset, cf): writes one held row's outputs. partial: (slices, 2, C)
// doubles.
template <int V, typename Terms, typename Stat, typename Out>
static __global__ void __launch_bounds__(kThreads, 1)
    batchnorm_one_kernel_nhwc_kernel(NhwcTiling t, Terms terms, Stat stat, Out out, double* __restrict__ partial) {
  constexpr int K = kHeldRows<V>, NC = Stat::kCoefs;
  __shared__ double red[kSumsShared<V>];
  __shared__ double total[2][kTileChannels];
  __shared__ float coef[NC][kTileChannels];
  const NhwcThread<V> th(t);
  const NhwcChannelOwner<V> own(t);
  const float before = own.owns ? stat.before(own.c) : 0.0f;
  int begin, end;
  slice_of(t.M, begin, end);
  typename Terms::Raw held[K];
  float sf[V], qf[V];
#pragma unroll
  for (int v = 0; v < V; ++v) sf[v] = qf[v] = 0.0f;
  if (th.active) {
    const typename Terms::Lanes lanes = terms.begin(th.c0);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int m = begin + th.r + k * t.TR;
      if (m < end) terms.load(held[k], static_cast<int64_t>(m) * t.C + th.c0);
    }
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (begin + th.r + k * t.TR < end) terms.add(lanes, held[k], sf, qf);
  }
  double s[V], q[V];
  widen_sums(sf, qf, s, q);
  sum_rows_pair(t, th, s, q, red);
  store_slice_partials(t, th, partial, s, q);
  cooperative_groups::this_grid().sync();  // fences: every slice's partials are visible
  add_slice_partials(t, th, partial, static_cast<int>(gridDim.x), s, q);
  sum_rows_pair(t, th, s, q, red);
  if (th.r == 0 && th.active) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      total[0][th.g * V + v] = s[v];
      total[1][th.g * V + v] = q[v];
    }
  }
  __syncthreads();
  if (own.owns) {
    float cf[NC];
    stat(own.c, total[0][own.slot], total[1][own.slot], before, blockIdx.x == 0, cf);
#pragma unroll
    for (int j = 0; j < NC; ++j) coef[j][own.slot] = cf[j];
  }
  __syncthreads();
  if (!th.active) return;
  float cf[NC][V];
#pragma unroll
  for (int j = 0; j < NC; ++j)
#pragma unroll
    for (int v = 0; v < V; ++v) cf[j][v] = coef[j][th.g * V + v];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int m = begin + th.r + k * t.TR;
    if (m < end) out(held[k], static_cast<int64_t>(m) * t.C + th.c0, cf);
  }
}

// The one-kernel forward's output: y = epi((x - cf[0]) cf[1] + cf[2]) (mean, scale, beta), as
// batchnorm_normalize_nhwc_kernel forms it.
template <int V, typename Epi, typename T>
struct NormalizeOut {
  Epi epi;
  T* __restrict__ y;  // (N, H, W, C)
  template <typename Raw>
  __device__ __forceinline__ void operator()(const Raw& r, int64_t at, const float (&cf)[4][V]) const {
    float e[V];
    unpack_raw<T>(r.x, e);
#pragma unroll
    for (int v = 0; v < V; ++v) e[v] = epi.forward(batchnorm_pre_activation(e[v], cf[0][v], cf[1][v], cf[2][v]));
    store_lanes(y, at, e);
  }
};

// The one-kernel backward's output: dx = a (g - b - (x - mean) k), g = epi'(y) dy (y held only
// when read_y; GradFromZ: epi'(z) dy), cf = (a, b, k, mean[, z's scale, beta]), as
// batchnorm_dx_nhwc_kernel forms it; nothing when dx is null.
template <int V, typename Epi, typename T>
struct DxOut {
  Epi epi;
  bool read_y;
  T* __restrict__ dx;  // (N, H, W, C) or null
  template <typename Raw, int NC>
  __device__ __forceinline__ void operator()(const Raw& r, int64_t at, const float (&cf)[NC][V]) const {
    static_assert(NC >= (kGradFromZ<Epi> ? 6 : 4), "DxOut: too few coefficients");
    if (!dx) return;
    float xv[V], yv[V], e[V];
    r.unpack(read_y, xv, e, yv);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      const float in = grad_input<Epi>(xv[v], yv[v], cf[3][v], cf[NC - 2][v], cf[NC - 1][v]);
      e[v] = cf[0][v] * (epi.grad(in, e[v]) - cf[1][v] - (xv[v] - cf[3][v]) * cf[2][v]);
    }
    store_lanes(dx, at, e);
  }
};

// Runs one direction on the one-kernel path (make_terms(width tag), stat, make_out(width tag);
// vec: the 16-byte path) when `path` allows it, the shape fits its tiling and the device holds
// the grid at once: returns whether it ran (false: the caller runs the two kernels). A forced
// path (NhwcPath::one) that cannot run throws instead.
template <typename MakeTerms, typename Stat, typename MakeOut>
static bool launch_one_kernel_nhwc(const ExecContext& ctx, cudaStream_t stream, const BatchnormShape& sh, bool vec,
                                   NhwcPath path, const char* what, MakeTerms&& make_terms, const Stat& stat,
                                   MakeOut&& make_out) {
  if (path == NhwcPath::two) return false;
  bool ran = false;
  auto go = [&](auto width) {
    constexpr int V = decltype(width)::value;
    NhwcTiling t;
    if (!nhwc_one_kernel_tiling<V>(sh, t)) {
      if (path == NhwcPath::one)
        CNN_THROW("{}: N={} C={} H={} W={} is too large for the one-kernel path ({} rows a thread, {} blocks)", what,
                  sh.N, sh.C, sh.H, sh.W, kHeldRows<V>, kOneKernelBlocks);
      return;
    }
    const auto terms = make_terms(width);
    const auto out = make_out(width);
    auto* kernel = batchnorm_one_kernel_nhwc_kernel<V, std::decay_t<decltype(terms)>, Stat, std::decay_t<decltype(out)>>;
    if (!cooperative_grid_fits(reinterpret_cast<const void*>(kernel), int64_t{t.slices} * t.tiles, path, what)) return;
    double* partial = scratch(ctx, sh, t.slices, 0, what).partial;
    launch_cooperative(kernel, dim3(static_cast<unsigned>(t.slices), static_cast<unsigned>(t.tiles)),
                       dim3(static_cast<unsigned>(t.TG * t.TR)), stream, t, terms, stat, out, partial);
    ran = true;
  };
  if (vec)
    go(std::integral_constant<int, 8>{});
  else
    go(std::integral_constant<int, 1>{});
  return ran;
}

}  // namespace cnn
