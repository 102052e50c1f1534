// Conv2d on CUDA in plain FP32 (no tensor cores, no TF32): implicit-GEMM kernels that take any
// shape (forward, data gradient, filter gradient) and direct kernels for convs whose filters each
// read one input channel (depthwise, C == 1 first layers). conv2d_forward_cuda and
// conv2d_backward_cuda choose per shape; the strategies are exported too (conv2d.h).
// Trap: nothing accumulates with atomics. Filter gradients split over N*P*Q are summed from
// workspace partials in a fixed order, and the split count depends on the shape alone. Where the
// sum is short, the last block of each output tile to finish does it (arrival counters, see
// reduce.cuh) instead of a separate kernel: the same additions in the same order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d.h"
#include "ops/conv2d_cuda.cuh"
#include "ops/reduce.cuh"

namespace cnn {

using namespace conv2d_cuda_detail;

// The sum over splits j = 0, 1, ... of parts[j * stride + at], in that order: every split
// reduction (a separate kernel or the last block of a group) adds its partials this way, so where
// the sum runs does not change the bits. Loads bypass L1: other blocks may have just written them.
__device__ __forceinline__ float sum_splits_at(const float* __restrict__ parts, int splits, int64_t stride,
                                               int64_t at) {
  float sum = 0.0f;
  for (int j = 0; j < splits; ++j) sum += __ldcg(parts + j * stride + at);
  return sum;
}

// ---- forward: y_g (Kg, N*P*Q) = w_g (Kg, Crs) * im2col(x_g) (Crs, N*P*Q) ----
// A long reduction over few tiles is split (blockIdx.z = group * splits + split): each split
// writes its partial (split, N, K, P, Q) to `parts`, and the tile's last split block to finish
// sums them in split order, adds the bias and writes y.

template <class Cfg, bool kVecA>
static __global__ void __launch_bounds__(256, 2)
    conv2d_forward_implicit_gemm_kernel(const ForwardParams p,
                                        const float* __restrict__ x,      // (N, C, H, W)
                                        const float* __restrict__ w,      // (K, C/groups, R, S)
                                        const float* __restrict__ b,      // (K) or null
                                        float* __restrict__ y,            // (N, K, P, Q)
                                        float* __restrict__ parts,        // (splits, N, K, P, Q) if split
                                        unsigned* __restrict__ counters) {  // one per tile if split
  __shared__ __align__(16) float smem[Cfg::kSmemFloats];
  const ConvDims& d = p.d;
  const int g = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const int m0 = blockIdx.y * Cfg::BM, n0 = blockIdx.x * Cfg::BN;
  const int red_begin = split * p.chunk, red_end = min(d.Crs, red_begin + p.chunk);
  const float* wg = w + g * d.Kg * d.Crs;
  const GatherLoader<Cfg, Cfg::BN, true, WindowDecode> bl(x + g * d.Cg * d.HW, n0, p.ncols, red_begin, red_end, d.H,
                                                          d.W, p.window, p.pixel);
  int ty, tx;
  thread_coords<Cfg>(ty, tx);
  float acc[Cfg::TM][Cfg::TN];
  float rb[decltype(bl)::kCount];
  const int tiles = (red_end - red_begin + Cfg::BK - 1) / Cfg::BK;
  if constexpr (kVecA) {
    const VecRowLoader<Cfg, Cfg::BM> al(wg, d.Crs, m0, d.Kg, red_begin, red_end);
    float4 ra[decltype(al)::kCount];
    gemm_mainloop<Cfg>(al, bl, tiles, ty, tx, acc, smem, ra, rb);
  } else {
    const RowLoader<Cfg, Cfg::BM, IdentityDelta> al(wg, d.Crs, m0, d.Kg, red_begin, red_end, IdentityDelta{});
    float ra[decltype(al)::kCount];
    gemm_mainloop<Cfg>(al, bl, tiles, ty, tx, acc, smem, ra, rb);
  }
  const FastDivmod div_pq = p.div_pq;
  const auto locate = [&](int col, int& n, int& pos) { div_pq.divmod(col, n, pos); };
  if (p.splits == 1) {
    store_planes<Cfg>(acc, ty, tx, m0, d.Kg, n0, p.ncols, p.has_bias ? b : nullptr, d.K, g * d.Kg, d.PQ, p.vec_store,
                      locate, y);
    return;
  }
  const int64_t numel = int64_t(p.ncols) * d.K;
  store_planes<Cfg>(acc, ty, tx, m0, d.Kg, n0, p.ncols, nullptr, d.K, g * d.Kg, d.PQ, p.vec_store, locate,
                    parts + split * numel);
  unsigned* counter = counters + (int64_t(g) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  if (!cuda::arrive_last(counter, unsigned(p.splits))) return;
  const int rows = min(Cfg::BM, d.Kg - m0), cols = min(Cfg::BN, p.ncols - n0);
  for (int t = int(threadIdx.x); t < rows * cols; t += Cfg::kThreads) {
    const int m = t / cols, ch = g * d.Kg + m0 + m;
    int n, pos;
    locate(n0 + t % cols, n, pos);
    const int64_t at = (int64_t(n) * d.K + ch) * d.PQ + pos;
    y[at] = sum_splits_at(parts, p.splits, numel, at) + (p.has_bias ? __ldg(b + ch) : 0.0f);
  }
}

// ---- data gradient, one residue class (ah, aw) of input rows/cols mod stride at a time ----
// Input row h = ah + stride_h*h' receives dy row p = (h + pad_h - r*dil_h) / stride_h exactly when
// the division is exact: for taps r = r0 + jr*Tr (Tr = stride_h / gcd(stride_h, dil_h)), where
// p = base_p + h' - jr*step_p (step_p = dil_h / gcd). So each class is a dense GEMM
// dx_g (Cg, N*Hc*Wc) = w_g^T (Cg, Kg*nR*nS) * gathered dy (Kg*nR*nS, N*Hc*Wc) with no dead taps.

template <class Cfg>
static __global__ void __launch_bounds__(256, 2)
    conv2d_backward_data_implicit_gemm_kernel(const DataParams p,
                                              const float* __restrict__ w,   // (K, C/groups, R, S)
                                              const float* __restrict__ dy,  // (N, K, P, Q)
                                              float* __restrict__ dx) {      // (N, C, H, W)
  __shared__ __align__(16) float smem[Cfg::kSmemFloats];
  const ConvDims& d = p.d;
  const int g = blockIdx.z, m0 = blockIdx.y * Cfg::BM, n0 = blockIdx.x * Cfg::BN;
  if (n0 >= p.ncols) return;
  const RowLoader<Cfg, Cfg::BM, DataWeightDelta> al(
      w + g * d.Kg * d.Cg * d.RS, d.RS, m0, d.Cg, 0, p.kred,
      DataWeightDelta{p.div_taps, p.div_ns, d.Cg * d.RS, d.S, p.r0, p.s0, p.Tr, p.Ts});
  const GatherLoader<Cfg, Cfg::BN, true, DataGradDecode> bl(
      dy + g * d.Kg * d.PQ, n0, p.ncols, 0, p.kred, d.P, d.Q,
      DataGradDecode{p.div_taps, p.div_ns, d.PQ, d.Q, p.step_p, p.step_q},
      DataPixelColumns{p.div_hcwc, p.div_wc, d.K * d.PQ, d.Q, p.base_p, p.base_q});
  int ty, tx;
  thread_coords<Cfg>(ty, tx);
  float acc[Cfg::TM][Cfg::TN];
  float ra[decltype(al)::kCount], rb[decltype(bl)::kCount];
  gemm_mainloop<Cfg>(al, bl, (p.kred + Cfg::BK - 1) / Cfg::BK, ty, tx, acc, smem, ra, rb);
  const FastDivmod div_hcwc = p.div_hcwc, div_wc = p.div_wc;
  const int ah = p.ah, aw = p.aw, sh = d.stride_h, sw = d.stride_w, W = d.W;
  store_planes<Cfg>(acc, ty, tx, m0, d.Cg, n0, p.ncols, nullptr, d.C, g * d.Cg, d.HW, p.vec_store,
                    [&](int col, int& n, int& pos) {
                      int hw, h, ww;
                      div_hcwc.divmod(col, n, hw);
                      div_wc.divmod(hw, h, ww);
                      pos = (ah + sh * h) * W + aw + sw * ww;
                    },
                    dx);
}

// ---- filter gradient: dw_g (Kg, Crs) = dy_g (Kg, N*P*Q) * im2col(x_g)^T (N*P*Q, Crs) ----
// The reduction N*P*Q is long and Kg*Crs often small: blockIdx.z also splits the reduction, each
// split writing its own partial (split, K, Cg, R, S), summed afterwards in split order: with
// counters (one per tile), by the tile's last split block into dw; else by sum_splits.

template <class Cfg>
static __global__ void __launch_bounds__(256, 2)
    conv2d_backward_filter_implicit_gemm_kernel(const FilterParams p,
                                                const float* __restrict__ x,   // (N, C, H, W)
                                                const float* __restrict__ dy,  // (N, K, P, Q)
                                                float* __restrict__ out,       // (splits, K, C/groups, R, S)
                                                unsigned* __restrict__ counters,  // or null
                                                float* __restrict__ dw) {      // (K, C/groups, R, S) with counters
  __shared__ __align__(16) float smem[Cfg::kSmemFloats];
  const ConvDims& d = p.d;
  const int g = blockIdx.z / p.splits, split = blockIdx.z % p.splits;
  const int m0 = blockIdx.y * Cfg::BM, n0 = blockIdx.x * Cfg::BN;
  const int red_begin = split * p.chunk, red_end = min(p.kred, red_begin + p.chunk);
  const RowLoader<Cfg, Cfg::BM, FilterGradDelta> al(dy + g * d.Kg * d.PQ, d.PQ, m0, d.Kg, red_begin, red_end,
                                                    FilterGradDelta{p.div_pq, d.K * d.PQ});
  const GatherLoader<Cfg, Cfg::BN, false, PixelDecode> bl(x + g * d.Cg * d.HW, n0, d.Crs, red_begin, red_end, d.H,
                                                          d.W, p.pixel, p.window);
  int ty, tx;
  thread_coords<Cfg>(ty, tx);
  float acc[Cfg::TM][Cfg::TN];
  float ra[decltype(al)::kCount], rb[decltype(bl)::kCount];
  gemm_mainloop<Cfg>(al, bl, (red_end - red_begin + Cfg::BK - 1) / Cfg::BK, ty, tx, acc, smem, ra, rb);
  // One "image" of K channels with planes of Crs: out[(split*K + g*Kg + m)*Crs + col].
  store_planes<Cfg>(acc, ty, tx, m0, d.Kg, n0, d.Crs, nullptr, d.K, g * d.Kg, d.Crs, p.vec_store,
                    [&](int col, int& n, int& pos) { n = split, pos = col; }, out);
  if (!counters) return;
  unsigned* counter = counters + (int64_t(g) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  if (!cuda::arrive_last(counter, unsigned(p.splits))) return;
  const int rows = min(Cfg::BM, d.Kg - m0), cols = min(Cfg::BN, d.Crs - n0);
  for (int t = int(threadIdx.x); t < rows * cols; t += Cfg::kThreads) {
    const int m = t / cols, col = t % cols;
    const int64_t at = int64_t(g * d.Kg + m0 + m) * d.Crs + n0 + col;
    dw[at] = sum_splits_at(out, p.splits, int64_t(d.K) * d.Crs, at);
  }
}

// ---- direct kernels for C/groups == 1: every filter reads one input channel ----

constexpr int kDirectKChunk = 16;  // filters per forward block, sharing the block's input taps

// One thread per output pixel for kDirectKChunk filters of one group: the pixel's taps (the
// group's Cg input channels x R x S, at most kMaxTaps) are read once into registers, the filters
// sit in shared memory.
template <int kMaxTaps>
static __global__ void __launch_bounds__(256)
    conv2d_forward_direct_kernel(const DirectParams p,
                                 const float* __restrict__ x,  // (N, C, H, W)
                                 const float* __restrict__ w,  // (K, Cg, R, S)
                                 const float* __restrict__ b,  // (K) or null
                                 float* __restrict__ y) {      // (N, K, P, Q)
  __shared__ float ws[kDirectKChunk * kMaxTaps];
  __shared__ float bs[kDirectKChunk];
  const ConvDims& d = p.d;
  const int k_begin = blockIdx.z * kDirectKChunk, k_count = min(kDirectKChunk, d.Kg - k_begin);
  const int pq = blockIdx.x * 256 + threadIdx.x;
  for (int ng = blockIdx.y; ng < d.N * d.groups; ng += gridDim.y) {
    const int n = ng / d.groups, g = ng % d.groups, k0 = g * d.Kg + k_begin;
    __syncthreads();  // the previous image's filters are no longer read
    for (int i = threadIdx.x; i < k_count * d.Crs; i += 256)
      ws[(i / d.Crs) * kMaxTaps + i % d.Crs] = w[k0 * d.Crs + i];
    if (int(threadIdx.x) < k_count) bs[threadIdx.x] = p.has_bias ? b[k0 + threadIdx.x] : 0.0f;
    __syncthreads();
    if (pq >= d.PQ) continue;
    int pp, qq;
    p.div_q.divmod(pq, pp, qq);
    const int h0 = pp * d.stride_h - d.pad_h, w0 = qq * d.stride_w - d.pad_w;
    const float* xp = x + (int64_t(n) * d.C + g * d.Cg) * d.HW;  // the group's first channel
    float xv[kMaxTaps];
    int r = 0, s = 0;
#pragma unroll
    for (int t = 0; t < kMaxTaps; ++t) {  // tap t = (ci, r, s), ci advancing xp a plane at a time
      const int ih = h0 + r * d.dil_h, iw = w0 + s * d.dil_w;
      xv[t] = (t < d.Crs && unsigned(ih) < unsigned(d.H) && unsigned(iw) < unsigned(d.W)) ? __ldg(xp + ih * d.W + iw)
                                                                                           : 0.0f;
      if (++s == d.S) {
        s = 0;
        if (++r == d.R) r = 0, xp += d.HW;
      }
    }
    for (int kc = 0; kc < k_count; ++kc) {
      float acc = bs[kc];
#pragma unroll
      for (int t = 0; t < kMaxTaps; ++t)
        if (t < d.Crs) acc = fmaf(ws[kc * kMaxTaps + t], xv[t], acc);
      y[(n * d.K + k0 + kc) * d.PQ + pq] = acc;
    }
  }
}

// One thread per input pixel: the sum over the group's filters and the taps that reach it
// (rows where (h + pad_h - r*dil_h) is a non-negative multiple of the stride inside P).
static __global__ void __launch_bounds__(256)
    conv2d_backward_data_direct_kernel(const DirectParams p,
                                       const float* __restrict__ w,   // (K, Cg, R, S)
                                       const float* __restrict__ dy,  // (N, K, P, Q)
                                       float* __restrict__ dx) {      // (N, C, H, W)
  const ConvDims& d = p.d;
  const int hw = blockIdx.x * 256 + threadIdx.x;
  if (hw >= d.HW) return;
  int h, ww;
  p.div_w.divmod(hw, h, ww);
  for (int nc = blockIdx.y; nc < d.N * d.C; nc += gridDim.y) {
    const int n = nc / d.C, c = nc % d.C, g = c / d.Cg;
    const float* dyn = dy + (int64_t(n) * d.K + g * d.Kg) * d.PQ;
    const float* wg = w + (g * d.Kg * d.Cg + c % d.Cg) * d.RS;  // filter kc's plane for c at kc * Crs
    float acc = 0.0f;
    for (int r = 0; r < d.R; ++r) {
      const int hp = h + d.pad_h - r * d.dil_h;
      if (hp < 0) break;  // later taps only move further up
      if (hp % d.stride_h != 0 || hp / d.stride_h >= d.P) continue;
      const int pp = hp / d.stride_h;
      for (int s = 0; s < d.S; ++s) {
        const int wq = ww + d.pad_w - s * d.dil_w;
        if (wq < 0) break;
        if (wq % d.stride_w != 0 || wq / d.stride_w >= d.Q) continue;
        const int off = pp * d.Q + wq / d.stride_w, tap = r * d.S + s;
        for (int kc = 0; kc < d.Kg; ++kc) acc = fmaf(__ldg(wg + kc * d.Crs + tap), __ldg(dyn + kc * d.PQ + off), acc);
      }
    }
    dx[nc * d.HW + hw] = acc;
  }
}

// Block (k, split): the partial dw[k, ci, r, s] over its run of N*P*Q, every tap (Cg x R x S) in a
// register; reduced in the block in a fixed order into out (splits, K, Cg, R, S). With counters
// (one per filter), filter k's last block sums its splits in order into dw.
template <int kMaxTaps>
static __global__ void __launch_bounds__(256)
    conv2d_backward_filter_direct_kernel(const DirectParams p, int chunk,
                                         const float* __restrict__ x,   // (N, C, H, W)
                                         const float* __restrict__ dy,  // (N, K, P, Q)
                                         float* __restrict__ out,       // (splits, K, Cg, R, S)
                                         unsigned* __restrict__ counters,  // (K) or null
                                         float* __restrict__ dw) {      // (K, Cg, R, S) with counters
  __shared__ float scratch[8 * kMaxTaps];
  const ConvDims& d = p.d;
  const int k = blockIdx.x, split = blockIdx.y, g = k / d.Kg;
  const int e_begin = split * chunk, e_end = min(d.N * d.PQ, e_begin + chunk);
  float acc[kMaxTaps];
#pragma unroll
  for (int t = 0; t < kMaxTaps; ++t) acc[t] = 0.0f;
  for (int e = e_begin + threadIdx.x; e < e_end; e += 256) {
    int n, pq, pp, qq;
    p.div_pq.divmod(e, n, pq);
    p.div_q.divmod(pq, pp, qq);
    const float gv = __ldg(dy + (n * d.K + k) * d.PQ + pq);
    const float* xp = x + (int64_t(n) * d.C + g * d.Cg) * d.HW;
    const int h0 = pp * d.stride_h - d.pad_h, w0 = qq * d.stride_w - d.pad_w;
    int r = 0, s = 0;
#pragma unroll
    for (int t = 0; t < kMaxTaps; ++t) {
      const int ih = h0 + r * d.dil_h, iw = w0 + s * d.dil_w;
      if (t < d.Crs && unsigned(ih) < unsigned(d.H) && unsigned(iw) < unsigned(d.W))
        acc[t] = fmaf(gv, __ldg(xp + ih * d.W + iw), acc[t]);
      if (++s == d.S) {
        s = 0;
        if (++r == d.R) r = 0, xp += d.HW;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kMaxTaps; ++t) {
    if (t >= d.Crs) break;
    float v = acc[t];
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0) scratch[(threadIdx.x / 32) * kMaxTaps + t] = v;
  }
  __syncthreads();
  if (int(threadIdx.x) < d.Crs) {
    float total = 0.0f;
    for (int wv = 0; wv < 8; ++wv) total += scratch[wv * kMaxTaps + threadIdx.x];
    out[(int64_t(split) * d.K + k) * d.Crs + threadIdx.x] = total;
  }
  if (counters && cuda::arrive_last(counters + k, gridDim.y) && int(threadIdx.x) < d.Crs) {
    const int64_t at = int64_t(k) * d.Crs + threadIdx.x;
    dw[at] = sum_splits_at(out, int(gridDim.y), int64_t(d.K) * d.Crs, at);
  }
}

// ---- shared by both strategies ----

// Block (k, split): the sum of dy over channel k in its run of N*P*Q, in a fixed order, into
// out (splits, K). Splitting keeps enough loads in flight when K is small. With counters (one per
// channel), channel k's last block sums its splits in order into db.
static __global__ void __launch_bounds__(256)
    conv2d_backward_bias_reduce_kernel(int count, int chunk, int K, FastDivmod div_pq,
                                       const float* __restrict__ dy,  // (N, K, P, Q)
                                       float* __restrict__ out,       // (splits, K)
                                       unsigned* __restrict__ counters,  // (K) or null
                                       float* __restrict__ db) {      // (K) with counters
  __shared__ float scratch[8];
  const int k = blockIdx.x, split = blockIdx.y, e_end = min(count, (split + 1) * chunk);
  float acc = 0.0f;
#pragma unroll 4
  for (int e = split * chunk + int(threadIdx.x); e < e_end; e += 256) {
    int n, pq;
    div_pq.divmod(e, n, pq);
    acc += __ldg(dy + (n * K + k) * div_pq.d + pq);
  }
  const float total = block_sum_256(acc, scratch);
  if (threadIdx.x == 0) out[split * K + k] = total;
  if (counters && cuda::arrive_last(counters + k, gridDim.y) && threadIdx.x == 0)
    db[k] = sum_splits_at(out, int(gridDim.y), K, k);
}

// out[i] = sum over splits of parts[split][i], splits in order.
static __global__ void __launch_bounds__(256)
    conv2d_backward_split_sum_kernel(const float* __restrict__ parts,  // (splits, count)
                                     int splits, int count,
                                     float* __restrict__ out) {  // (count)
  for (int i = blockIdx.x * 256 + threadIdx.x; i < count; i += gridDim.x * 256)
    out[i] = sum_splits_at(parts, splits, count, i);
}

// ---- launch helpers ----

// Tensors stay below 2^30 elements so that int32 index sums with padding offsets cannot overflow.
constexpr int64_t kMaxElements = int64_t(1) << 30;
// Taps of one filter (input channels per group x R x S) the direct kernels hold in registers.
// 81 takes mini_xception's small dense layers (8 channels x 3x3, 1x1 up to 64 channels), where a
// 64-row GEMM tile computes 8 useful rows.
constexpr int kDirectMidTaps = 25, kDirectMaxTaps = 81;
// Reduction elements per split of a filter gradient. 512 left mini_xception's 1x1 layers at batch
// 32 (128x128 filters, N*P*Q = 1152: one 128x128 tile) with 2 blocks and 33-43 us backward filter
// passes; 64 gives them 18, and the partial sums cost splits x K*C floats, a few MB at most here.
constexpr int64_t kMinSplitReduction = 64;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
static int gcd_int(int a, int b) { return b == 0 ? a : gcd_int(b, a % b); }

static bool fits_int32(const Conv2dShape& sh) {
  return sh.N * sh.C * sh.H * sh.W < kMaxElements && sh.N * sh.K * sh.P * sh.Q < kMaxElements &&
         sh.weight_numel() < kMaxElements && sh.H + 2 * sh.pad_h < kMaxElements / 4 && sh.W + 2 * sh.pad_w < kMaxElements / 4;
}

// Ops take shapes that may have been filled by hand: recompute P, Q through make().
static void check_shape(const Conv2dShape& sh, const char* strategy) {
  Conv2dShape ok = Conv2dShape::make(sh.N, sh.C, sh.H, sh.W, sh.K, sh.R, sh.S, sh.stride_h, sh.stride_w, sh.pad_h,
                                     sh.pad_w, sh.dilation_h, sh.dilation_w, sh.groups, sh.has_bias);
  CNN_CHECK(ok.P == sh.P && ok.Q == sh.Q, "conv2d: shape says output {}x{}, but {} gives {}x{}", sh.P, sh.Q,
            sh.to_string(), ok.P, ok.Q);
  CNN_CHECK(fits_int32(sh), "conv2d cuda ({}): {} has a tensor of 2^30 or more elements", strategy, sh.to_string());
}

static ConvDims dims_of(const Conv2dShape& sh) {
  ConvDims d;
  d.N = int(sh.N), d.C = int(sh.C), d.H = int(sh.H), d.W = int(sh.W), d.K = int(sh.K), d.R = int(sh.R);
  d.S = int(sh.S), d.P = int(sh.P), d.Q = int(sh.Q);
  d.stride_h = sh.stride_h, d.stride_w = sh.stride_w, d.pad_h = sh.pad_h, d.pad_w = sh.pad_w;
  d.dil_h = sh.dilation_h, d.dil_w = sh.dilation_w, d.groups = sh.groups;
  d.Cg = d.C / d.groups, d.Kg = d.K / d.groups, d.HW = d.H * d.W, d.PQ = d.P * d.Q, d.RS = d.R * d.S;
  d.Crs = d.Cg * d.RS;
  return d;
}

static WindowDecode window_decode(const ConvDims& d) {
  return WindowDecode{FastDivmod(d.RS), FastDivmod(d.S), d.HW, d.W, d.dil_h, d.dil_w};
}
static PixelDecode pixel_decode(const ConvDims& d) {
  return PixelDecode{FastDivmod(d.PQ), FastDivmod(d.Q), d.C * d.HW, d.W, d.stride_h, d.stride_w, d.pad_h, d.pad_w};
}

// Measured on the H200 (vgg_fer layers, batch 64): 128x128 tiles beat 64x64 ones by 10-40% from
// 100 blocks up and lose 2x at ~50; 64x128 tiles beat 64x64 by 10-25% from 200 blocks up and lose
// 1.5x at ~50. So the largest tile that still makes enough blocks.
enum class Tile { big, mid, small };
constexpr int64_t kMinBigTileBlocks = 96, kMinMidTileBlocks = 132;
static Tile choose_tile(int64_t M, int64_t ncols, int64_t batches) {
  if (M > 64 && ceil_div(M, 128) * ceil_div(ncols, 128) * batches >= kMinBigTileBlocks) return Tile::big;
  if (ceil_div(M, 64) * ceil_div(ncols, 128) * batches >= kMinMidTileBlocks) return Tile::mid;
  return Tile::small;
}

static float* device_scratch(const ExecContext& ctx, size_t count) {
  CNN_CHECK(ctx.workspace && ctx.workspace->device() == Device::cuda,
            "conv2d cuda: the context needs a device workspace ({} floats)", count);
  return ctx.workspace->get(count);
}

static void check_operands(const Conv2dShape& sh, const char* strategy, const void* b) {
  CNN_CHECK(!sh.has_bias || b, "conv2d cuda ({}): the shape has a bias but b is null", strategy);
}

// The forward's tiles: (N*P*Q tiles, Kg tiles, groups), times splits in z.
template <class Cfg>
static dim3 forward_gemm_tiles(const ConvDims& d) {
  return dim3(unsigned(ceil_div(int64_t(d.N) * d.PQ, Cfg::BN)), unsigned(ceil_div(d.Kg, Cfg::BM)), unsigned(d.groups));
}

template <class Cfg>
static void launch_forward_gemm(const ExecContext& ctx, ForwardParams p, bool vec_a, const float* x, const float* w,
                                const float* b, float* y, cudaStream_t stream) {
  dim3 grid = forward_gemm_tiles<Cfg>(p.d);
  float* parts = nullptr;
  unsigned* counters = nullptr;
  if (p.splits > 1) {
    parts = device_scratch(ctx, size_t(p.splits) * size_t(p.ncols) * size_t(p.d.K));
    counters = cuda::arrival_counters(ctx, size_t(grid.x) * grid.y * grid.z, "conv2d cuda implicit gemm forward");
    p.vec_store = p.d.PQ % 4 == 0 && aligned16(parts);
  }
  grid.z *= unsigned(p.splits);
  if (vec_a)
    conv2d_forward_implicit_gemm_kernel<Cfg, true><<<grid, Cfg::kThreads, 0, stream>>>(p, x, w, b, y, parts, counters);
  else
    conv2d_forward_implicit_gemm_kernel<Cfg, false><<<grid, Cfg::kThreads, 0, stream>>>(p, x, w, b, y, parts, counters);
  CUDA_CHECK_LAUNCH("conv2d_forward_implicit_gemm_kernel");
}

// Taps of one dimension that reach input positions a, a + stride, ...: the first r0, their count
// n (spaced stride/gcd(stride, dil) apart) and the output index `base` the first of them reads
// for position a.
static void class_taps(int a, int pad, int stride, int dil, int R, int& r0, int& n, int& base) {
  const int period = stride / gcd_int(stride, dil);
  r0 = 0, n = 0, base = 0;
  for (int r = 0; r < period && r < R; ++r)
    if ((a + pad - r * dil) % stride == 0) {
      r0 = r;
      n = (R - 1 - r) / period + 1;
      base = (a + pad - r * dil) / stride;
      return;
    }
}

template <class Cfg>
static void launch_data_gemm(const DataParams& p, const float* w, const float* dy, float* dx, cudaStream_t stream) {
  const dim3 grid(unsigned(ceil_div(p.ncols, Cfg::BN)), unsigned(ceil_div(p.d.Cg, Cfg::BM)), unsigned(p.d.groups));
  conv2d_backward_data_implicit_gemm_kernel<Cfg><<<grid, Cfg::kThreads, 0, stream>>>(p, w, dy, dx);
  CUDA_CHECK_LAUNCH("conv2d_backward_data_implicit_gemm_kernel");
}

// One launch per residue class of (h mod stride_h, w mod stride_w): stride 1 is a single class.
static void data_gemm(const Conv2dShape& sh, const float* w, const float* dy, float* dx, cudaStream_t stream) {
  const ConvDims d = dims_of(sh);
  const int gh = gcd_int(d.stride_h, d.dil_h), gw = gcd_int(d.stride_w, d.dil_w);
  for (int ah = 0; ah < std::min(d.stride_h, d.H); ++ah)
    for (int aw = 0; aw < std::min(d.stride_w, d.W); ++aw) {
      DataParams p{};
      p.d = d, p.ah = ah, p.aw = aw;
      p.Hc = (d.H - ah + d.stride_h - 1) / d.stride_h, p.Wc = (d.W - aw + d.stride_w - 1) / d.stride_w;
      int nR, nS;
      class_taps(ah, d.pad_h, d.stride_h, d.dil_h, d.R, p.r0, nR, p.base_p);
      class_taps(aw, d.pad_w, d.stride_w, d.dil_w, d.S, p.s0, nS, p.base_q);
      p.Tr = d.stride_h / gh, p.Ts = d.stride_w / gw, p.step_p = d.dil_h / gh, p.step_q = d.dil_w / gw;
      p.kred = d.Kg * nR * nS, p.ncols = d.N * p.Hc * p.Wc;
      p.vec_store = d.stride_h == 1 && d.stride_w == 1 && d.HW % 4 == 0 && aligned16(dx);
      p.div_taps = FastDivmod(std::max(1, nR * nS)), p.div_ns = FastDivmod(std::max(1, nS));
      p.div_hcwc = FastDivmod(p.Hc * p.Wc), p.div_wc = FastDivmod(p.Wc);
      switch (choose_tile(d.Cg, p.ncols, d.groups)) {
        case Tile::big: launch_data_gemm<BigTile>(p, w, dy, dx, stream); break;
        case Tile::mid: launch_data_gemm<MidTile>(p, w, dy, dx, stream); break;
        case Tile::small: launch_data_gemm<SmallTile>(p, w, dy, dx, stream); break;
      }
    }
}

// The filter gradient's tiles: (Crs tiles, Kg tiles, groups), times splits in z.
template <class Cfg>
static dim3 filter_gemm_tiles(const ConvDims& d) {
  return dim3(unsigned(ceil_div(d.Crs, Cfg::BN)), unsigned(ceil_div(d.Kg, Cfg::BM)), unsigned(d.groups));
}

template <class Cfg>
static void launch_filter_gemm(const FilterParams& p, const float* x, const float* dy, float* out,
                               unsigned* counters, float* dw, cudaStream_t stream) {
  dim3 grid = filter_gemm_tiles<Cfg>(p.d);
  grid.z *= unsigned(p.splits);
  conv2d_backward_filter_implicit_gemm_kernel<Cfg><<<grid, Cfg::kThreads, 0, stream>>>(p, x, dy, out, counters, dw);
  CUDA_CHECK_LAUNCH("conv2d_backward_filter_implicit_gemm_kernel");
}

struct SplitPlan {
  int splits = 1, chunk = 0;
};

// Splits of a reduction of length `len` over `blocks` blocks: enough to reach `target` blocks, each
// at least min_len long, within grid and index limits; chunk is a multiple of `align`.
static SplitPlan plan_splits(int64_t len, int64_t blocks, int64_t min_len, int64_t max_splits, int64_t align,
                             int64_t target = cuda::kFillBlocks) {
  int64_t s = blocks < target ? ceil_div(target, blocks) : 1;
  s = std::max<int64_t>(1, std::min({s, len / min_len, max_splits}));
  const int64_t c = ceil_div(ceil_div(len, s), align) * align;
  SplitPlan plan;
  plan.chunk = int(c);
  plan.splits = int(ceil_div(len, c));
  return plan;
}

// Whether a split reduction is summed by the last block of each group (fold) rather than by
// sum_splits: when each of a block's 256 threads then loads at most kMaxFoldLoads partials (one
// block does the group's sum, so a long one would serialise what sum_splits spreads over the GPU).
constexpr int64_t kMaxFoldLoads = 64;
static bool fold_splits(int64_t splits, int64_t group_elements) {
  return splits > 1 && ceil_div(group_elements, 256) * splits <= kMaxFoldLoads;
}

// Forward tiles and reduction splits: a split only where the reduction Crs is long (at least
// kMinForwardSplit per split) and the tiles alone leave the GPU idle, and only as far as the last
// block can fold it.
constexpr int64_t kMinForwardSplit = 256;
struct ForwardGemmPlan {
  Tile tile;
  SplitPlan split;
};
template <class Cfg>
static SplitPlan plan_forward_split(const ConvDims& d) {
  const dim3 t = forward_gemm_tiles<Cfg>(d);
  const int64_t tail = std::min<int64_t>(Cfg::BM, d.Kg) * std::min<int64_t>(Cfg::BN, int64_t(d.N) * d.PQ);
  const int64_t most = std::max<int64_t>(1, kMaxFoldLoads / ceil_div(tail, 256));
  return plan_splits(d.Crs, int64_t(t.x) * t.y * t.z, kMinForwardSplit, std::min<int64_t>(most, 65535 / d.groups),
                     Cfg::BK);
}
static ForwardGemmPlan plan_forward_gemm(const ConvDims& d) {
  ForwardGemmPlan plan{choose_tile(d.Kg, int64_t(d.N) * d.PQ, d.groups), {}};
  switch (plan.tile) {
    case Tile::big: plan.split = plan_forward_split<BigTile>(d); break;
    case Tile::mid: plan.split = plan_forward_split<MidTile>(d); break;
    case Tile::small: plan.split = plan_forward_split<SmallTile>(d); break;
  }
  return plan;
}

static void sum_splits(const float* parts, int splits, int64_t count, float* out, cudaStream_t stream) {
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(count, 256), 4096));
  conv2d_backward_split_sum_kernel<<<blocks, 256, 0, stream>>>(parts, splits, int(count), out);
  CUDA_CHECK_LAUNCH("conv2d_backward_split_sum_kernel");
}

struct FilterGemmPlan {
  FilterParams p;
  bool big;
};

static FilterGemmPlan plan_filter_gemm(const Conv2dShape& sh) {
  const ConvDims d = dims_of(sh);
  FilterGemmPlan plan{};
  FilterParams& p = plan.p;
  p.d = d, p.window = window_decode(d), p.pixel = pixel_decode(d), p.div_pq = FastDivmod(d.PQ);
  p.kred = d.N * d.PQ;
  // The split reduction restores the block count, so big tiles need only full-ish dimensions
  // (64x128 tiles measured no faster than 64x64 here).
  plan.big = d.Kg >= 128 && d.Crs >= 128;
  const int64_t tile = plan.big ? BigTile::BM : SmallTile::BM;
  const int64_t blocks = ceil_div(d.Kg, tile) * ceil_div(d.Crs, tile) * d.groups;
  const SplitPlan split = plan_splits(p.kred, blocks, kMinSplitReduction,
                                      std::min<int64_t>(65535 / d.groups, kMaxElements / sh.weight_numel()),
                                      plan.big ? BigTile::BK : SmallTile::BK);
  p.splits = split.splits, p.chunk = split.chunk;
  return plan;
}

// parts: plan.p.splits * weight_numel floats when there is more than one split.
template <class Cfg>
static void filter_gemm_with(const ExecContext& ctx, FilterParams p, const Conv2dShape& sh, const float* x,
                             const float* dy, float* dw, float* parts, cudaStream_t stream) {
  float* out = p.splits > 1 ? parts : dw;
  p.vec_store = p.d.Crs % 4 == 0 && aligned16(out);
  const dim3 tiles = filter_gemm_tiles<Cfg>(p.d);
  const bool fold = fold_splits(p.splits, std::min<int64_t>(Cfg::BM, p.d.Kg) * std::min<int64_t>(Cfg::BN, p.d.Crs));
  unsigned* counters =
      fold ? cuda::arrival_counters(ctx, size_t(tiles.x) * tiles.y * tiles.z, "conv2d cuda filter gradient") : nullptr;
  launch_filter_gemm<Cfg>(p, x, dy, out, counters, dw, stream);
  if (p.splits > 1 && !fold) sum_splits(out, p.splits, sh.weight_numel(), dw, stream);
}

static void filter_gemm(const ExecContext& ctx, const FilterGemmPlan& plan, const Conv2dShape& sh, const float* x,
                        const float* dy, float* dw, float* parts, cudaStream_t stream) {
  if (plan.big)
    filter_gemm_with<BigTile>(ctx, plan.p, sh, x, dy, dw, parts, stream);
  else
    filter_gemm_with<SmallTile>(ctx, plan.p, sh, x, dy, dw, parts, stream);
}

static SplitPlan plan_bias(const Conv2dShape& sh) {
  return plan_splits(sh.N * sh.P * sh.Q, sh.K, 4096, std::min<int64_t>(65535, kMaxElements / sh.K), 256);
}

// parts: plan.splits * K floats when there is more than one split.
static void bias_reduce(const ExecContext& ctx, const Conv2dShape& sh, const SplitPlan& plan, const float* dy,
                        float* db, float* parts, cudaStream_t stream) {
  float* out = plan.splits > 1 ? parts : db;
  const bool fold = fold_splits(plan.splits, 1);
  unsigned* counters = fold ? cuda::arrival_counters(ctx, size_t(sh.K), "conv2d cuda bias gradient") : nullptr;
  conv2d_backward_bias_reduce_kernel<<<dim3(unsigned(sh.K), unsigned(plan.splits)), 256, 0, stream>>>(
      int(sh.N * sh.P * sh.Q), plan.chunk, int(sh.K), FastDivmod(int(sh.P * sh.Q)), dy, out, counters, db);
  CUDA_CHECK_LAUNCH("conv2d_backward_bias_reduce_kernel");
  if (plan.splits > 1 && !fold) sum_splits(parts, plan.splits, sh.K, db, stream);
}

bool conv2d_cuda_bias_gradient_can_implement(const Conv2dShape& sh) {
  return sh.K >= 1 && sh.K <= 65535 && sh.N * sh.P * sh.Q >= 1 && sh.N * sh.K * sh.P * sh.Q < kMaxElements;
}

size_t conv2d_cuda_bias_gradient_workspace_bytes(const Conv2dShape& sh) {
  const SplitPlan plan = plan_bias(sh);
  return plan.splits > 1 ? sizeof(float) * size_t(plan.splits) * size_t(sh.K) : 0;
}

void conv2d_cuda_bias_gradient(const ExecContext& ctx, const Conv2dShape& sh, const float* dy, float* db,
                               float* parts) {
  CNN_CHECK(conv2d_cuda_bias_gradient_can_implement(sh), "conv2d cuda bias gradient cannot run {}", sh.to_string());
  const SplitPlan plan = plan_bias(sh);
  CNN_CHECK(plan.splits <= 1 || parts, "conv2d cuda bias gradient: {} splits need partials", plan.splits);
  bias_reduce(ctx, sh, plan, dy, db, parts, static_cast<cudaStream_t>(ctx.cuda_stream));
}

// One workspace request per call (Workspace::get invalidates earlier pointers), cut in two.
static void take_scratch(const ExecContext& ctx, size_t count_a, size_t count_b, float*& a, float*& b) {
  float* base = count_a + count_b > 0 ? device_scratch(ctx, count_a + count_b) : nullptr;
  a = count_a ? base : nullptr;
  b = count_b ? base + count_a : nullptr;
}

static DirectParams direct_params(const Conv2dShape& sh) {
  DirectParams p{};
  p.d = dims_of(sh);
  p.div_q = FastDivmod(p.d.Q), p.div_w = FastDivmod(p.d.W), p.div_pq = FastDivmod(p.d.PQ);
  p.has_bias = sh.has_bias;
  return p;
}

static void forward_direct(const Conv2dShape& sh, const float* x, const float* w, const float* b, float* y,
                           cudaStream_t stream) {
  const DirectParams p = direct_params(sh);
  const dim3 grid(unsigned(ceil_div(p.d.PQ, 256)), unsigned(std::min<int64_t>(sh.N * sh.groups, 65535)),
                  unsigned(ceil_div(p.d.Kg, kDirectKChunk)));
  if (p.d.Crs <= 9)
    conv2d_forward_direct_kernel<9><<<grid, 256, 0, stream>>>(p, x, w, b, y);
  else if (p.d.Crs <= kDirectMidTaps)
    conv2d_forward_direct_kernel<kDirectMidTaps><<<grid, 256, 0, stream>>>(p, x, w, b, y);
  else
    conv2d_forward_direct_kernel<kDirectMaxTaps><<<grid, 256, 0, stream>>>(p, x, w, b, y);
  CUDA_CHECK_LAUNCH("conv2d_forward_direct_kernel");
}

static void data_direct(const Conv2dShape& sh, const float* w, const float* dy, float* dx, cudaStream_t stream) {
  const DirectParams p = direct_params(sh);
  const dim3 grid(unsigned(ceil_div(p.d.HW, 256)), unsigned(std::min<int64_t>(sh.N * sh.C, 65535)));
  conv2d_backward_data_direct_kernel<<<grid, 256, 0, stream>>>(p, w, dy, dx);
  CUDA_CHECK_LAUNCH("conv2d_backward_data_direct_kernel");
}

// Its blocks are latency-bound loops over single pixels: 4x the usual block count fills the SMs.
static SplitPlan plan_filter_direct(const Conv2dShape& sh) {
  return plan_splits(sh.N * sh.P * sh.Q, sh.K, 2048, std::min<int64_t>(65535, kMaxElements / sh.weight_numel()), 256,
                     4 * cuda::kFillBlocks);
}

// parts: plan.splits * weight_numel floats when there is more than one split.
static void filter_direct(const ExecContext& ctx, const Conv2dShape& sh, const SplitPlan& plan, const float* x,
                          const float* dy, float* dw, float* parts, cudaStream_t stream) {
  const DirectParams p = direct_params(sh);
  float* out = plan.splits > 1 ? parts : dw;
  const bool fold = fold_splits(plan.splits, p.d.Crs);
  unsigned* c = fold ? cuda::arrival_counters(ctx, size_t(sh.K), "conv2d cuda filter gradient") : nullptr;
  const dim3 grid(unsigned(sh.K), unsigned(plan.splits));
  if (p.d.Crs <= 9)
    conv2d_backward_filter_direct_kernel<9><<<grid, 256, 0, stream>>>(p, plan.chunk, x, dy, out, c, dw);
  else if (p.d.Crs <= kDirectMidTaps)
    conv2d_backward_filter_direct_kernel<kDirectMidTaps><<<grid, 256, 0, stream>>>(p, plan.chunk, x, dy, out, c, dw);
  else
    conv2d_backward_filter_direct_kernel<kDirectMaxTaps><<<grid, 256, 0, stream>>>(p, plan.chunk, x, dy, out, c, dw);
  CUDA_CHECK_LAUNCH("conv2d_backward_filter_direct_kernel");
  if (plan.splits > 1 && !fold) sum_splits(out, plan.splits, sh.weight_numel(), dw, stream);
}

// ---- exported: the strategies, then the per-shape choice ----

bool conv2d_cuda_implicit_gemm_can_implement(const Conv2dShape& sh) {
  if (sh.groups < 1 || sh.C % sh.groups != 0 || sh.K % sh.groups != 0) return false;
  return fits_int32(sh) && sh.groups <= 65535 && sh.K / sh.groups <= 65535 * 64 && sh.C / sh.groups <= 65535 * 64;
}

bool conv2d_cuda_direct_can_implement(const Conv2dShape& sh) {
  if (sh.groups < 1 || sh.C % sh.groups != 0 || sh.K % sh.groups != 0) return false;
  return sh.C / sh.groups * sh.R * sh.S <= kDirectMaxTaps && fits_int32(sh) &&
         ceil_div(sh.K / sh.groups, kDirectKChunk) <= 65535;
}

size_t conv2d_cuda_implicit_gemm_forward_workspace_bytes(const Conv2dShape& sh) {
  const SplitPlan split = plan_forward_gemm(dims_of(sh)).split;
  return split.splits > 1 ? sizeof(float) * size_t(split.splits) * size_t(sh.N * sh.K * sh.P * sh.Q) : 0;
}

size_t conv2d_cuda_implicit_gemm_workspace_bytes(const Conv2dShape& sh, bool dw, bool db) {
  const int64_t splits = dw ? plan_filter_gemm(sh).p.splits : 1, bias_splits = db ? plan_bias(sh).splits : 1;
  return sizeof(float) * size_t((splits > 1 ? splits * sh.weight_numel() : 0) + (bias_splits > 1 ? bias_splits * sh.K : 0));
}

size_t conv2d_cuda_direct_workspace_bytes(const Conv2dShape& sh, bool dw, bool db) {
  const int64_t splits = dw ? plan_filter_direct(sh).splits : 1, bias_splits = db ? plan_bias(sh).splits : 1;
  return sizeof(float) * size_t((splits > 1 ? splits * sh.weight_numel() : 0) + (bias_splits > 1 ? bias_splits * sh.K : 0));
}

void conv2d_forward_cuda_implicit_gemm(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                       const float* b, float* y) {
  check_shape(sh, "implicit gemm");
  CNN_CHECK(conv2d_cuda_implicit_gemm_can_implement(sh), "conv2d cuda implicit gemm cannot run {}", sh.to_string());
  check_operands(sh, "implicit gemm", b);
  const ConvDims d = dims_of(sh);
  ForwardParams p{};
  p.d = d, p.window = window_decode(d), p.pixel = pixel_decode(d), p.div_pq = FastDivmod(d.PQ);
  p.ncols = d.N * d.PQ, p.has_bias = sh.has_bias, p.vec_store = d.PQ % 4 == 0 && aligned16(y);
  const ForwardGemmPlan plan = plan_forward_gemm(d);
  p.splits = plan.split.splits, p.chunk = plan.split.chunk;
  const bool vec_a = d.Crs % 4 == 0 && aligned16(w);
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  switch (plan.tile) {
    case Tile::big: launch_forward_gemm<BigTile>(ctx, p, vec_a, x, w, b, y, stream); break;
    case Tile::mid: launch_forward_gemm<MidTile>(ctx, p, vec_a, x, w, b, y, stream); break;
    case Tile::small: launch_forward_gemm<SmallTile>(ctx, p, vec_a, x, w, b, y, stream); break;
  }
}

void conv2d_backward_cuda_implicit_gemm(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                        const float* dy, float* dx, float* dw, float* db) {
  check_shape(sh, "implicit gemm");
  CNN_CHECK(conv2d_cuda_implicit_gemm_can_implement(sh), "conv2d cuda implicit gemm cannot run {}", sh.to_string());
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  const FilterGemmPlan fplan = plan_filter_gemm(sh);
  const SplitPlan bplan = plan_bias(sh);
  float *dw_parts, *db_parts;
  take_scratch(ctx, dw && fplan.p.splits > 1 ? size_t(fplan.p.splits) * size_t(sh.weight_numel()) : 0,
               db && bplan.splits > 1 ? size_t(bplan.splits) * size_t(sh.K) : 0, dw_parts, db_parts);
  if (dx) data_gemm(sh, w, dy, dx, stream);
  if (dw) filter_gemm(ctx, fplan, sh, x, dy, dw, dw_parts, stream);
  if (db) bias_reduce(ctx, sh, bplan, dy, db, db_parts, stream);
}

void conv2d_forward_cuda_direct(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                const float* b, float* y) {
  check_shape(sh, "direct");
  CNN_CHECK(conv2d_cuda_direct_can_implement(sh),
            "conv2d cuda direct needs at most {} taps a filter (input channels per group x R x S), got {}",
            kDirectMaxTaps,
            sh.to_string());
  check_operands(sh, "direct", b);
  forward_direct(sh, x, w, b, y, static_cast<cudaStream_t>(ctx.cuda_stream));
}

void conv2d_backward_cuda_direct(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                 const float* dy, float* dx, float* dw, float* db) {
  check_shape(sh, "direct");
  CNN_CHECK(conv2d_cuda_direct_can_implement(sh),
            "conv2d cuda direct needs at most {} taps a filter (input channels per group x R x S), got {}",
            kDirectMaxTaps,
            sh.to_string());
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  const SplitPlan fplan = plan_filter_direct(sh), bplan = plan_bias(sh);
  float *dw_parts, *db_parts;
  take_scratch(ctx, dw && fplan.splits > 1 ? size_t(fplan.splits) * size_t(sh.weight_numel()) : 0,
               db && bplan.splits > 1 ? size_t(bplan.splits) * size_t(sh.K) : 0, dw_parts, db_parts);
  if (dx) data_direct(sh, w, dy, dx, stream);
  if (dw) filter_direct(ctx, sh, fplan, x, dy, dw, dw_parts, stream);
  if (db) bias_reduce(ctx, sh, bplan, dy, db, db_parts, stream);
}

// The plain path (conv2d_forward_cuda without an autotuner) keeps the direct kernels for what they
// were first measured on: one input channel per filter and at most 25 taps.
bool conv2d_cuda_direct_is_default(const Conv2dShape& sh) {
  return sh.groups >= 1 && sh.C == sh.groups && sh.R * sh.S <= kDirectMidTaps && conv2d_cuda_direct_can_implement(sh);
}

// Direct kernels where every filter reads one input channel (depthwise, C == 1 first layers: the
// GEMM would have a reduction of only R*S there), implicit GEMM everywhere else.
void conv2d_forward_cuda(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w, const float* b,
                         float* y) {
  if (conv2d_cuda_direct_is_default(sh))
    conv2d_forward_cuda_direct(ctx, sh, x, w, b, y);
  else
    conv2d_forward_cuda_implicit_gemm(ctx, sh, x, w, b, y);
}

void conv2d_backward_cuda(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                          const float* dy, float* dx, float* dw, float* db) {
  if (conv2d_cuda_direct_is_default(sh))
    conv2d_backward_cuda_direct(ctx, sh, x, w, dy, dx, dw, db);
  else
    conv2d_backward_cuda_implicit_gemm(ctx, sh, x, w, dy, dx, dw, db);
}

}  // namespace cnn
