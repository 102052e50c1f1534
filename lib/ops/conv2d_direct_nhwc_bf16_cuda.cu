// Direct NHWC BF16 convolutions on the GPU for filters that read one input channel
// (conv2d_direct_nhwc_bf16.h): FP32 sums, no tensor cores (these layers are bound by memory and
// launch count). Consecutive threads take consecutive 8-channel chunks of a pixel, so loads and
// stores are 16 bytes and coalesce along the channels.
// Modes (kWidth 8 or 1): output channel k reads input channel k / mult; with kWidth 8 and
// mult == 1 a chunk's 8 inputs are one 16-byte load, with mult % 8 == 0 they are one element.
// E, the element type (bf16 or f16, half16.cuh), is a template parameter of every kernel.
// The rows kernels (3x3, stride_w 1) walk output rows, loading each x column once per window row,
// 4 channels a thread; the pixels kernels take the other shapes.
// Trap: the window loops check bounds per tap; the 3x3 instantiation unrolls them.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d_direct_bf16_sum.h"
#include "ops/conv2d_direct_nhwc_bf16.h"
#include "ops/conv2d_direct_nhwc_bf16_layout.h"
#include "ops/conv2d_igemm_bf16_decode.h"
#include "ops/half16.cuh"
#include "ops/reduce.cuh"

namespace cnn {

using igemm_bf16_detail::Div;
using igemm_bf16_detail::for_each_data_tap;

struct DirectNhwcParams {
  Div div_chunks, div_q, div_p, div_w, div_h, div_sh, div_sw;
  int C, H, W, K, P, Q, R, S, sh, sw, ph, pw, dh, dw, mult;
};

// v[0..7] += the 8 E of a (16 bytes) times those of b.
template <class E>
__device__ __forceinline__ void fma8(float (&v)[8], const uint4& a, const uint4& b) {
  const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[2 * j] += Half16<E>::lo(aw[j]) * Half16<E>::lo(bw[j]);
    v[2 * j + 1] += Half16<E>::hi(aw[j]) * Half16<E>::hi(bw[j]);
  }
}
// v[0..7] += x * the 8 E of b.
template <class E>
__device__ __forceinline__ void fma8(float (&v)[8], float x, const uint4& b) {
  const uint32_t bw[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[2 * j] += x * Half16<E>::lo(bw[j]);
    v[2 * j + 1] += x * Half16<E>::hi(bw[j]);
  }
}
// One E (its bits) as a float.
template <class E>
__device__ __forceinline__ float fl(uint16_t v) {
  return Half16<E>::to_float(v);
}
__device__ __forceinline__ uint4 ld16(const uint16_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// y[n, p, q, k0 .. k0 + kWidth) for one item (pixel, channel chunk); kRS: the window if fixed.
template <class E, int kWidth, int kFixedR, int kFixedS>
static __global__ void __launch_bounds__(kDirectNhwcThreads)
    conv2d_forward_direct_nhwc_kernel(const DirectNhwcParams d, int items,
                                      const uint16_t* __restrict__ x,         // (N, H, W, C)
                                      const uint16_t* __restrict__ w,         // (R, S, K)
                                      const float* __restrict__ b,            // (K) or null
                                      bool relu, uint16_t* __restrict__ y) {  // (N, P, Q, K)
  const int R = kFixedR ? kFixedR : d.R, S = kFixedS ? kFixedS : d.S;
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < items; i += int(gridDim.x * blockDim.x)) {
    int pix, chunk, n, pq, p, q;
    d.div_chunks.divmod(i, pix, chunk);
    d.div_q.divmod(pix, pq, q);
    d.div_p.divmod(pq, n, p);
    const int k0 = chunk * kWidth, c0 = k0 / d.mult;
    const uint16_t* xn = x + int64_t(n) * d.H * d.W * d.C + c0;
    const int h0 = p * d.sh - d.ph, w0 = q * d.sw - d.pw;
    float acc[kWidth] = {};
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int h = h0 + r * d.dh;
      if (unsigned(h) >= unsigned(d.H)) continue;
#pragma unroll
      for (int s = 0; s < S; ++s) {
        const int ww = w0 + s * d.dw;
        if (unsigned(ww) >= unsigned(d.W)) continue;
        const uint16_t* xp = xn + (h * d.W + ww) * d.C;
        const uint16_t* wp = w + (r * S + s) * d.K + k0;
        if constexpr (kWidth == 8) {
          if (d.mult == 1)
            fma8<E>(acc, ld16(xp), ld16(wp));
          else
            fma8<E>(acc, fl<E>(__ldg(xp)), ld16(wp));
        } else {
          acc[0] += fl<E>(__ldg(xp)) * fl<E>(__ldg(wp));
        }
      }
    }
    uint16_t out[kWidth];
#pragma unroll
    for (int j = 0; j < kWidth; ++j) {
      float v = acc[j] + (b ? __ldg(b + k0 + j) : 0.0f);
      out[j] = Half16<E>::from_float(relu ? fmaxf(v, 0.0f) : v);
    }
    uint16_t* yp = y + int64_t(pix) * d.K + k0;
    if constexpr (kWidth == 8)
      *reinterpret_cast<uint4*>(yp) = make_uint4(out[0] | (uint32_t(out[1]) << 16), out[2] | (uint32_t(out[3]) << 16),
                                                 out[4] | (uint32_t(out[5]) << 16), out[6] | (uint32_t(out[7]) << 16));
    else
      yp[0] = out[0];
  }
}

// dx[n, h, w, c0 .. c0 + kWidth): kWidth 8 needs mult == 1 (the chunk's channels are dy's); with
// kWidth 1 one input channel sums its mult output channels (16 bytes at a time when vec8).
template <class E, int kWidth, bool kVec8>
static __global__ void __launch_bounds__(kDirectNhwcThreads)
    conv2d_backward_data_direct_nhwc_kernel(const DirectNhwcParams d, int items,
                                            const uint16_t* __restrict__ w,   // (R, S, K)
                                            const uint16_t* __restrict__ dy,  // (N, P, Q, K)
                                            uint16_t* __restrict__ dx) {      // (N, H, W, C)
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < items; i += int(gridDim.x * blockDim.x)) {
    int pix, chunk, n, hw, h, ww;
    d.div_chunks.divmod(i, pix, chunk);
    d.div_w.divmod(pix, hw, ww);
    d.div_h.divmod(hw, n, h);
    const int c0 = chunk * kWidth, k0 = c0 * d.mult;
    const uint16_t* dyn = dy + int64_t(n) * d.P * d.Q * d.K + k0;
    float acc[kWidth] = {};
    for_each_data_tap(d, h, ww, [&](int r, int s, int p, int q) {
      const uint16_t* dyp = dyn + (p * d.Q + q) * d.K;
      const uint16_t* wp = w + (r * d.S + s) * d.K + k0;
      if constexpr (kWidth == 8) {
        fma8<E>(acc, ld16(dyp), ld16(wp));
      } else if constexpr (kVec8) {  // mult % 8 == 0
        float part[8] = {};
        for (int j = 0; j < d.mult; j += 8) fma8<E>(part, ld16(dyp + j), ld16(wp + j));
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[0] += part[j];
      } else {
        for (int j = 0; j < d.mult; ++j) acc[0] += fl<E>(__ldg(dyp + j)) * fl<E>(__ldg(wp + j));
      }
    });
    uint16_t* dxp = dx + int64_t(pix) * d.C + c0;
    if constexpr (kWidth == 8)
      *reinterpret_cast<uint4*>(dxp) = make_uint4(Half16<E>::pack2(acc[0], acc[1]), Half16<E>::pack2(acc[2], acc[3]),
                                                  Half16<E>::pack2(acc[4], acc[5]), Half16<E>::pack2(acc[6], acc[7]));
    else
      dxp[0] = Half16<E>::from_float(acc[0]);
  }
}

// Partial (slice, k, tap) = sum over the slice's positions of dy[npq, k] * x under tap (r, s) of
// channel k / mult; tap R*S is the bias (x := 1). Block: lanes_k channel chunks x lanes_p pixel
// lanes; grid: channel groups x slices x tap groups of kDirectNhwcTaps.
template <class E, int kWidth>
static __global__ void __launch_bounds__(kDirectNhwcThreads)
    conv2d_backward_filter_direct_nhwc_kernel(const DirectNhwcParams d, DirectNhwcFilterGrid g, int npq, int per_slice,
                                              const uint16_t* __restrict__ x,   // (N, H, W, C)
                                              const uint16_t* __restrict__ dy,  // (N, P, Q, K)
                                              float* __restrict__ parts) {      // (slices, K, R*S + 1)
  constexpr int kTaps = kDirectNhwcTaps;
  __shared__ float lanes[kDirectNhwcThreads / 32][32][kWidth];
  const int t = int(threadIdx.x), lk = t % g.lanes_k, lp = t / g.lanes_k;
  const int chunk = int(blockIdx.x) * g.lanes_k + lk, k0 = chunk * kWidth, RS = d.R * d.S, taps = RS + 1;
  const bool active = k0 < d.K;  // lanes_p * lanes_k == the block's threads
  const int tap0 = int(blockIdx.z) * kTaps;
  int th[kTaps], tw[kTaps];
#pragma unroll
  for (int j = 0; j < kTaps; ++j) {
    const int tap = tap0 + j;
    th[j] = tap < RS ? tap / d.S * d.dh : 0;
    tw[j] = tap < RS ? tap % d.S * d.dw : 0;
  }
  float acc[kTaps][kWidth] = {};
  const int begin = int(blockIdx.y) * per_slice, end = min(npq, begin + per_slice);
  const int c0 = k0 / d.mult;
  for (int j = begin + lp; active && j < end; j += g.lanes_p) {
    int pq, n, p, q;
    d.div_q.divmod(j, pq, q);
    d.div_p.divmod(pq, n, p);
    float gv[kWidth];
    if constexpr (kWidth == 8)
      half16_unpack8<E>(ld16(dy + int64_t(j) * d.K + k0), gv);
    else
      gv[0] = fl<E>(__ldg(dy + int64_t(j) * d.K + k0));
    const uint16_t* xn = x + int64_t(n) * d.H * d.W * d.C + c0;
    const int h0 = p * d.sh - d.ph, w0 = q * d.sw - d.pw;
#pragma unroll
    for (int tj = 0; tj < kTaps; ++tj) {
      const int tap = tap0 + tj;
      if (tap == RS) {
#pragma unroll
        for (int v = 0; v < kWidth; ++v) acc[tj][v] += gv[v];
      } else if (tap < RS) {
        const int h = h0 + th[tj], ww = w0 + tw[tj];
        if (unsigned(h) < unsigned(d.H) && unsigned(ww) < unsigned(d.W)) {
          const uint16_t* xp = xn + (h * d.W + ww) * d.C;
          if constexpr (kWidth == 8) {
            if (d.mult == 1) {
              float xv[8];
              half16_unpack8<E>(ld16(xp), xv);
#pragma unroll
              for (int v = 0; v < 8; ++v) acc[tj][v] += gv[v] * xv[v];
            } else {
              const float xv = fl<E>(__ldg(xp));
#pragma unroll
              for (int v = 0; v < 8; ++v) acc[tj][v] += gv[v] * xv;
            }
          } else {
            acc[tj][0] += gv[0] * fl<E>(__ldg(xp));
          }
        }
      }
    }
  }
  // Block sums over the pixel lanes, one tap at a time, in a fixed order: a butterfly over the
  // lanes of each warp (lanes_k apart, lanes_k a power of two), then the 8 warps in order.
  constexpr int kWarps = kDirectNhwcThreads / 32;
  for (int tj = 0; tj < kTaps && tap0 + tj < taps; ++tj) {
#pragma unroll
    for (int v = 0; v < kWidth; ++v) {
      float a = acc[tj][v];
      for (int off = g.lanes_k; off < 32; off *= 2) a += __shfl_xor_sync(0xffffffffu, a, off);
      if (t % 32 < g.lanes_k) lanes[t / 32][t % 32][v] = a;
    }
    __syncthreads();
    if (t < g.lanes_k * kWidth) {
      const int ok = t / kWidth, v = t % kWidth, k = (int(blockIdx.x) * g.lanes_k + ok) * kWidth + v;
      if (k < d.K) {
        float s = 0.0f;
        for (int w = 0; w < kWarps; ++w) s += lanes[w][ok][v];
        parts[(int64_t(blockIdx.y) * d.K + k) * taps + tap0 + tj] = s;
      }
    }
    __syncthreads();
  }
}

// The rows kernels' view of their input (N, Hi, Wi, Ci) and output (N, Ho, Wo, K): the forward
// pass and the filter gradient as they are, the data gradient as the forward pass over dy with the
// window flipped (stride 1, multiplier 1: output h, w reads dy rows h - ph + r * dh, columns
// w - pw + s through tap (R-1-r, S-1-s), with ph = (R-1) * dh - pad_h, pw = S-1 - pad_w).
struct DirectNhwcWalk {
  Div div_rows, div_segs;  // Ho, segments a row
  int Hi, Wi, Ci, Ho, Wo, K, sh, ph, pw, dh, mult;
};

// One item (n, segment [qa, qa + nq), output row p) of a rows walk, 3x3 window, stride_w and
// dilation_w 1: its lane walks the x columns j = j0 + u, u < steps (qa - pw .. qa + nq - pw + 1);
// column j feeds output column j + pw - s through tap s. xrow: the window rows' offsets of channel
// c0 (valid where hv).
struct RowItem {
  int n, p, qa, nq, j0, steps, xrow[3];
  bool hv[3];
};
__device__ __forceinline__ RowItem row_item(const DirectNhwcWalk& d, const DirectNhwcRowGrid& g, int item, int c0) {
  RowItem it;
  int rest, seg;
  d.div_rows.divmod(item, rest, it.p);
  d.div_segs.divmod(rest, it.n, seg);
  it.qa = seg * g.seg_len, it.nq = min(d.Wo - it.qa, g.seg_len), it.j0 = it.qa - d.pw, it.steps = it.nq + 2;
#pragma unroll
  for (int r = 0; r < 3; ++r) {
    const int h = it.p * d.sh - d.ph + r * d.dh;
    it.hv[r] = unsigned(h) < unsigned(d.Hi);
    it.xrow[r] = it.hv[r] ? ((it.n * d.Hi + h) * d.Wi) * d.Ci + c0 : 0;  // no offset past x
  }
  return it;
}

// The raw loads of one step of a walk: the x column's 3 window rows (4 channels, or with !kVecX one
// element in .x that feeds the 4 output channels; zeros outside x) and, in the filter gradient, the
// dy entering the window.
struct RowStep {
  uint2 x[3];
  uint2 g;
};
__device__ __forceinline__ uint2 ld8(const uint16_t* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
template <class E>
__device__ __forceinline__ void unpack4(const uint2& u, float (&v)[4]) {
  v[0] = Half16<E>::lo(u.x), v[1] = Half16<E>::hi(u.x), v[2] = Half16<E>::lo(u.y), v[3] = Half16<E>::hi(u.y);
}
template <bool kVecX>
__device__ __forceinline__ void fetch_column(const DirectNhwcWalk& d, const RowItem& it, const uint16_t* x, int u,
                                             RowStep& s) {
  const int j = it.j0 + u;
  const bool jv = u < it.steps && unsigned(j) < unsigned(d.Wi);
#pragma unroll
  for (int r = 0; r < 3; ++r) {
    const bool in = jv && it.hv[r];
    if (kVecX)
      s.x[r] = in ? ld8(x + it.xrow[r] + j * d.Ci) : make_uint2(0, 0);
    else
      s.x[r] = make_uint2(in ? __ldg(x + it.xrow[r] + j * d.Ci) : 0u, 0u);
  }
}
// The 4 channels' x of a loaded window row.
template <class E, bool kVecX>
__device__ __forceinline__ void column_values(const uint2& u, float (&xv)[4]) {
  if (kVecX) {
    unpack4<E>(u, xv);
  } else {
    const float e = Half16<E>::lo(u.x);
#pragma unroll
    for (int v = 0; v < 4; ++v) xv[v] = e;
  }
}
// a[s] = a[s - 1] for s = 2, 1: a window over 3 columns slides by one (a[0] is the caller's to fill).
__device__ __forceinline__ void slide(float (&a)[3][4]) {
#pragma unroll
  for (int s = 2; s > 0; --s)
#pragma unroll
    for (int v = 0; v < 4; ++v) a[s][v] = a[s - 1][v];
}
// consume(u, step) for u < steps in order, with the loads of fetch(u) issued kAhead steps ahead
// (kAhead named buffers, unrolled, so no register waits on a load it is not consuming).
template <int kAhead, class Fetch, class Consume>
__device__ __forceinline__ void walk_ahead(int steps, Fetch&& fetch, Consume&& consume) {
  RowStep b[kAhead];
#pragma unroll
  for (int i = 0; i < kAhead; ++i) b[i] = fetch(i);
  for (int u = 0; u < steps; u += kAhead) {
#pragma unroll
    for (int i = 0; i < kAhead; ++i) {
      if (u + i >= steps) break;
      const RowStep c = b[i];
      b[i] = fetch(u + i + kAhead);
      consume(u + i, c);
    }
  }
}

// Partial (slice, k, tap) as the pixels kernel below, for 3x3 windows with stride_w and dilation_w 1:
// a lane walks the x columns of its items (row_item), loading each column's 3 window rows once and
// the dy of q = j + pw once; dyw[s] holds the dy of q = j + pw - s, the output column that column j
// feeds through tap s. All 9 taps and the bias sum in FP32 registers. Block: lanes_k channel groups
// of 4 x lanes_p item lanes; grid: channel groups x slices.
template <class E, bool kVecX>
static __global__ void __launch_bounds__(kDirectNhwcThreads, 2)
    conv2d_backward_filter_direct_nhwc_rows_kernel(const DirectNhwcWalk d, const DirectNhwcRowGrid g,
                                                   const uint16_t* __restrict__ x,   // (N, H, W, C)
                                                   const uint16_t* __restrict__ dy,  // (N, P, Q, K)
                                                   float* __restrict__ parts) {      // (slices, K, 10)
  constexpr int kR = 3, kS = 3, kTaps = kR * kS + 1, kW = kDirectNhwcRowWidth, kVals = kTaps * kW;
  constexpr int kWarps = kDirectNhwcThreads / 32;
  __shared__ float red[kWarps][kVals][32];
  const int t = int(threadIdx.x), lk = t % g.lanes_k, lp = t / g.lanes_k;
  const int k0 = (int(blockIdx.x) * g.lanes_k + lk) * kW, c0 = kVecX ? k0 : k0 / d.mult;
  const bool active = k0 < d.K;
  float acc[kTaps][kW] = {};
  const int first = int(blockIdx.y) * g.lanes_p * g.per_lane + lp;
  for (int m = 0; active && m < g.per_lane; ++m) {
    const int item = first + m * g.lanes_p;
    if (item >= g.items) break;
    const RowItem it = row_item(d, g, item, c0);
    const uint16_t* dyrow = dy + ((it.n * d.Ho + it.p) * d.Wo + it.qa) * d.K + k0;
    float dyw[kS][kW] = {};
    auto fetch = [&](int u) {
      RowStep b;
      b.g = u < it.nq ? ld8(dyrow + u * d.K) : make_uint2(0, 0);
      fetch_column<kVecX>(d, it, x, u, b);
      return b;
    };
    auto consume = [&](int u, const RowStep& b) {
      slide(dyw);
      unpack4<E>(b.g, dyw[0]);  // zeros past the segment
#pragma unroll
      for (int v = 0; v < kW; ++v) acc[kTaps - 1][v] += dyw[0][v];
      if (unsigned(it.j0 + u) >= unsigned(d.Wi)) return;  // a padding column: no tap reads it
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (!it.hv[r]) continue;
        float xv[kW];
        column_values<E, kVecX>(b.x[r], xv);
#pragma unroll
        for (int s = 0; s < kS; ++s) {
          if (unsigned(u - s) >= unsigned(it.nq)) continue;  // dyw[s] is outside the segment
#pragma unroll
          for (int v = 0; v < kW; ++v) acc[r * kS + s][v] += xv[v] * dyw[s][v];
        }
      }
    };
    // One x element a step (C == 1 first layers): dy is most of the bytes, so more steps ahead.
    walk_ahead<kVecX ? 2 : 4>(it.steps, fetch, consume);
  }
  // Block sums in a fixed order: a butterfly over the lanes of each warp that share channels
  // (lanes_k apart, lanes_k a power of two), then the 8 warps in order.
  const int lane = t % 32, warp = t / 32;
#pragma unroll
  for (int e = 0; e < kVals; ++e) {
    float a = acc[e / kW][e % kW];
    for (int off = g.lanes_k; off < 32; off *= 2) a += __shfl_xor_sync(0xffffffffu, a, off);
    if (lane < g.lanes_k) red[warp][e][lane] = a;
  }
  __syncthreads();
  for (int o = t; o < g.lanes_k * kVals; o += kDirectNhwcThreads) {
    const int ok = o % g.lanes_k, e = o / g.lanes_k, k = (int(blockIdx.x) * g.lanes_k + ok) * kW + e % kW;
    if (k >= d.K) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += red[w][e][ok];
    parts[(int64_t(blockIdx.y) * d.K + k) * kTaps + e / kW] = sum;
  }
}

// y[n, p, q, k0 .. k0 + 4) for the q of an item (row_item), 3x3 window, stride_w and dilation_w 1:
// a lane walks the item's x columns, loading each column's 3 window rows once; o[s] holds the
// partial sum of output column qa + u - s, so o[2] is complete (stored) after its third column.
// Weights (9 taps x 4 channels) and bias stay in registers.
template <class E, bool kVecX, bool kFlip>
static __global__ void __launch_bounds__(kDirectNhwcThreads, 2)
    conv2d_forward_direct_nhwc_rows_kernel(const DirectNhwcWalk d, const DirectNhwcRowGrid g,
                                           const uint16_t* __restrict__ x,         // (N, Hi, Wi, Ci)
                                           const uint16_t* __restrict__ w,         // (R, S, K)
                                           const float* __restrict__ b,            // (K) or null
                                           bool relu, uint16_t* __restrict__ y) {  // (N, Ho, Wo, K)
  constexpr int kR = 3, kS = 3, kW = kDirectNhwcRowWidth;
  const int t = int(threadIdx.x), lk = t % g.lanes_k, lp = t / g.lanes_k;
  const int k0 = (int(blockIdx.x) * g.lanes_k + lk) * kW, c0 = kVecX ? k0 : k0 / d.mult;
  if (k0 >= d.K) return;  // no block-wide step follows
  float wv[kR][kS][kW], bias[kW];
#pragma unroll
  for (int r = 0; r < kR; ++r)
#pragma unroll
    for (int s = 0; s < kS; ++s)
      unpack4<E>(ld8(w + (kFlip ? (kR - 1 - r) * kS + kS - 1 - s : r * kS + s) * d.K + k0), wv[r][s]);
#pragma unroll
  for (int v = 0; v < kW; ++v) bias[v] = b ? __ldg(b + k0 + v) : 0.0f;
  const int first = int(blockIdx.y) * g.lanes_p * g.per_lane + lp;
  for (int m = 0; m < g.per_lane; ++m) {
    const int item = first + m * g.lanes_p;
    if (item >= g.items) break;
    const RowItem it = row_item(d, g, item, c0);
    uint16_t* yrow = y + ((it.n * d.Ho + it.p) * d.Wo + it.qa) * d.K + k0;
    float o[kS][kW] = {};
    auto fetch = [&](int u) {
      RowStep s;
      fetch_column<kVecX>(d, it, x, u, s);
      return s;
    };
    auto consume = [&](int u, const RowStep& c) {
      slide(o);
#pragma unroll
      for (int v = 0; v < kW; ++v) o[0][v] = 0.0f;
#pragma unroll
      for (int r = 0; r < kR; ++r) {  // padding reads zeros: they add nothing
        float xv[kW];
        column_values<E, kVecX>(c.x[r], xv);
#pragma unroll
        for (int s = 0; s < kS; ++s)
#pragma unroll
          for (int v = 0; v < kW; ++v) o[s][v] += xv[v] * wv[r][s][v];
      }
      const int qi = u - (kS - 1);
      if (qi < 0 || qi >= it.nq) return;
      float out[kW];
#pragma unroll
      for (int v = 0; v < kW; ++v) out[v] = relu ? fmaxf(o[kS - 1][v] + bias[v], 0.0f) : o[kS - 1][v] + bias[v];
      *reinterpret_cast<uint2*>(yrow + qi * d.K) =
          make_uint2(Half16<E>::pack2(out[0], out[1]), Half16<E>::pack2(out[2], out[3]));
    };
    walk_ahead<2>(it.steps, fetch, consume);
  }
}

static DirectNhwcParams direct_nhwc_params(const Conv2dShape& sh, int chunks) {
  return {Div(chunks),      Div(sh.Q),     Div(sh.P),     Div(sh.W),       Div(sh.H),   Div(sh.stride_h),
          Div(sh.stride_w), int(sh.C),     int(sh.H),     int(sh.W),       int(sh.K),   int(sh.P),
          int(sh.Q),        int(sh.R),     int(sh.S),     sh.stride_h,     sh.stride_w, sh.pad_h,
          sh.pad_w,         sh.dilation_h, sh.dilation_w, int(sh.K / sh.C)};
}

static cudaStream_t checked_stream(const ExecContext& ctx, const Conv2dShape& sh, const char* what) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  if (!conv2d_direct_nhwc_bf16_can_implement(sh))
    CNN_THROW("{}: cannot implement {} (needs C / groups == 1 and tensors under 2^31 elements)", what, sh.to_string());
  return stream;
}

static bool aligned8(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 7u) == 0; }

// The forward pass's (and the filter gradient's) walk; the row and segment divisors are the
// launcher's.
static DirectNhwcWalk forward_walk(const Conv2dShape& sh) {
  const int H = int(sh.H), W = int(sh.W), C = int(sh.C), P = int(sh.P), Q = int(sh.Q), K = int(sh.K);
  return {{}, {}, H, W, C, P, Q, K, sh.stride_h, sh.pad_h, sh.pad_w, sh.dilation_h, K / C};
}

// The data gradient's walk (stride 1, multiplier 1): the forward walk over dy with the window
// flipped (DirectNhwcWalk).
static DirectNhwcWalk data_walk(const Conv2dShape& sh) {
  const int H = int(sh.H), W = int(sh.W), C = int(sh.C), P = int(sh.P), Q = int(sh.Q), K = int(sh.K);
  const int dh = sh.dilation_h;
  return {{}, {}, P, Q, K, H, W, C, 1, 2 * dh - sh.pad_h, 2 - sh.pad_w, dh, 1};
}

static void refuse_rows(const Conv2dShape& sh, const char* what) {
  CNN_THROW(
      "{}: the rows kernel cannot take {} (needs a 3x3 window, stride_w and dilation_w 1, channel groups of 4, "
      "8-byte aligned tensors; the data gradient also stride 1 and multiplier 1)",
      what, sh.to_string());
}

// The forward rows kernel over (N, Hi, Wi, Ci) -> (N, Ho, Wo, K): the forward pass, or (flip) the
// data gradient.
template <class E>
static void forward_rows(cudaStream_t stream, DirectNhwcWalk d, int64_t rows, const uint16_t* x, const uint16_t* w,
                         const float* b, bool relu, uint16_t* y, bool flip) {
  const DirectNhwcRowGrid g = direct_nhwc_row_grid(rows, d.Wo, d.K / kDirectNhwcRowWidth, 3);
  d.div_rows = Div(d.Ho), d.div_segs = Div(g.segs);
  const dim3 grid(unsigned(g.groups_k), unsigned(g.slices));
  auto kernel = flip          ? conv2d_forward_direct_nhwc_rows_kernel<E, true, true>
                : d.mult == 1 ? conv2d_forward_direct_nhwc_rows_kernel<E, true, false>
                              : conv2d_forward_direct_nhwc_rows_kernel<E, false, false>;
  kernel<<<grid, kDirectNhwcThreads, 0, stream>>>(d, g, x, w, b, relu, y);
}

template <class E>
static void forward(const ExecContext& ctx, const Conv2dShape& sh, const E* x, const E* w, const float* b, E* y,
                    bool relu, DirectNhwcKernel kernel, const char* what) {
  cudaStream_t stream = checked_stream(ctx, sh, what);
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  const auto* ws = reinterpret_cast<const uint16_t*>(w);
  auto* ys = reinterpret_cast<uint16_t*>(y);
  const bool rows = direct_nhwc_rows_shape(sh) && aligned8(ws) && aligned8(ys) && (sh.K != sh.C || aligned8(xs));
  if (kernel == DirectNhwcKernel::rows && !rows) refuse_rows(sh, what);
  if (rows && kernel != DirectNhwcKernel::pixels) {
    forward_rows<E>(stream, forward_walk(sh), sh.N * sh.P, xs, ws, b, relu, ys, false);
    CUDA_CHECK_LAUNCH(what);
    return;
  }
  const bool vec = direct_nhwc_channel_width(sh) == 8 && cuda::aligned16(ws) && cuda::aligned16(ys) &&
                   (sh.K / sh.C != 1 || cuda::aligned16(xs));
  const int width = vec ? 8 : 1, items = int(sh.N * sh.P * sh.Q * sh.K / width);
  const DirectNhwcParams d = direct_nhwc_params(sh, int(sh.K / width));
  const unsigned blocks = cuda::grid_blocks(items, kDirectNhwcThreads, 1 << 16);
  const bool three = sh.R == 3 && sh.S == 3;
  if (vec)
    (three ? conv2d_forward_direct_nhwc_kernel<E, 8, 3, 3>
           : conv2d_forward_direct_nhwc_kernel<E, 8, 0, 0>)<<<blocks, kDirectNhwcThreads, 0, stream>>>(d, items, xs, ws,
                                                                                                       b, relu, ys);
  else
    (three ? conv2d_forward_direct_nhwc_kernel<E, 1, 3, 3>
           : conv2d_forward_direct_nhwc_kernel<E, 1, 0, 0>)<<<blocks, kDirectNhwcThreads, 0, stream>>>(d, items, xs, ws,
                                                                                                       b, relu, ys);
  CUDA_CHECK_LAUNCH(what);
}

template <class E>
static void backward_data(const ExecContext& ctx, const Conv2dShape& sh, const E* w, const E* dy, E* dx,
                          DirectNhwcKernel kernel, const char* what) {
  cudaStream_t stream = checked_stream(ctx, sh, what);
  const auto* ws = reinterpret_cast<const uint16_t*>(w);
  const auto* dys = reinterpret_cast<const uint16_t*>(dy);
  auto* dxs = reinterpret_cast<uint16_t*>(dx);
  const bool rows = direct_nhwc_rows_data_shape(sh) && aligned8(ws) && aligned8(dys) && aligned8(dxs);
  if (kernel == DirectNhwcKernel::rows && !rows) refuse_rows(sh, what);
  if (rows && kernel != DirectNhwcKernel::pixels) {
    forward_rows<E>(stream, data_walk(sh), sh.N * sh.H, dys, ws, nullptr, false, dxs, true);
    CUDA_CHECK_LAUNCH(what);
    return;
  }
  const int64_t mult = sh.K / sh.C;
  const bool aligned = cuda::aligned16(ws) && cuda::aligned16(dys);
  const bool wide = mult == 1 && sh.C % 8 == 0 && aligned && cuda::aligned16(dxs);
  const bool vec8 = !wide && mult % 8 == 0 && aligned;
  const int width = wide ? 8 : 1, items = int(sh.N * sh.H * sh.W * sh.C / width);
  const DirectNhwcParams d = direct_nhwc_params(sh, int(sh.C / width));
  const unsigned blocks = cuda::grid_blocks(items, kDirectNhwcThreads, 1 << 16);
  auto fn = wide   ? conv2d_backward_data_direct_nhwc_kernel<E, 8, false>
            : vec8 ? conv2d_backward_data_direct_nhwc_kernel<E, 1, true>
                   : conv2d_backward_data_direct_nhwc_kernel<E, 1, false>;
  fn<<<blocks, kDirectNhwcThreads, 0, stream>>>(d, items, ws, dys, dxs);
  CUDA_CHECK_LAUNCH(what);
}

template <class E>
static void backward_filter(const ExecContext& ctx, const Conv2dShape& sh, const E* x, const E* dy, float* dw,
                            float* db, DirectNhwcKernel kernel, const char* what) {
  cudaStream_t stream = checked_stream(ctx, sh, what);
  if (!dw && !db) return;
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  const auto* dys = reinterpret_cast<const uint16_t*>(dy);
  const bool mult1 = sh.K == sh.C;
  const bool rows = direct_nhwc_rows_shape(sh) && aligned8(dys) && (!mult1 || aligned8(xs));
  if (kernel == DirectNhwcKernel::rows && !rows) refuse_rows(sh, what);
  auto* parts = static_cast<float*>(cuda::workspace_bytes(ctx, conv2d_direct_nhwc_bf16_workspace_bytes(sh), what));
  int slices = 0;
  if (rows && kernel != DirectNhwcKernel::pixels) {
    const DirectNhwcRowGrid g = direct_nhwc_row_grid(sh);
    slices = g.slices;
    DirectNhwcWalk d = forward_walk(sh);
    d.div_rows = Div(sh.P), d.div_segs = Div(g.segs);
    const dim3 grid(unsigned(g.groups_k), unsigned(g.slices));
    (mult1 ? conv2d_backward_filter_direct_nhwc_rows_kernel<E, true>
           : conv2d_backward_filter_direct_nhwc_rows_kernel<E, false>)<<<grid, kDirectNhwcThreads, 0, stream>>>(
        d, g, xs, dys, parts);
  } else {
    const bool vec =
        direct_nhwc_channel_width(sh) == 8 && cuda::aligned16(dys) && (sh.K / sh.C != 1 || cuda::aligned16(xs));
    const int width = vec ? 8 : 1;
    DirectNhwcFilterGrid g = direct_nhwc_filter_grid(sh, width);
    g.slices = slices = conv2d_direct_nhwc_bf16_filter_slices(sh, DirectNhwcKernel::pixels);  // whatever the width
    const DirectNhwcParams d = direct_nhwc_params(sh, int(sh.K / width));
    const int npq = int(sh.N * sh.P * sh.Q), per_slice = (npq + g.slices - 1) / g.slices;
    const dim3 grid(unsigned(g.groups_k), unsigned(g.slices), unsigned(g.tap_groups));
    if (vec)
      conv2d_backward_filter_direct_nhwc_kernel<E, 8>
          <<<grid, kDirectNhwcThreads, 0, stream>>>(d, g, npq, per_slice, xs, dys, parts);
    else
      conv2d_backward_filter_direct_nhwc_kernel<E, 1>
          <<<grid, kDirectNhwcThreads, 0, stream>>>(d, g, npq, per_slice, xs, dys, parts);
  }
  CUDA_CHECK_LAUNCH(what);
  conv2d_direct_bf16_sum_slices_cuda(stream, parts, slices, int(sh.K), int(sh.R * sh.S) + 1, dw, db, what);
}

void conv2d_forward_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x, const bf16* w,
                                     const float* b, bf16* y, bool relu, DirectNhwcKernel kernel) {
  forward(ctx, sh, x, w, b, y, relu, kernel, "conv2d forward direct nhwc bf16");
}
void conv2d_forward_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* w,
                                     const float* b, f16* y, bool relu, DirectNhwcKernel kernel) {
  forward(ctx, sh, x, w, b, y, relu, kernel, "conv2d forward direct nhwc f16");
}
void conv2d_backward_data_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* w, const bf16* dy,
                                           bf16* dx, DirectNhwcKernel kernel) {
  backward_data(ctx, sh, w, dy, dx, kernel, "conv2d backward data direct nhwc bf16");
}
void conv2d_backward_data_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* w, const f16* dy,
                                           f16* dx, DirectNhwcKernel kernel) {
  backward_data(ctx, sh, w, dy, dx, kernel, "conv2d backward data direct nhwc f16");
}
void conv2d_backward_filter_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x,
                                             const bf16* dy, float* dw, float* db, DirectNhwcKernel kernel) {
  backward_filter(ctx, sh, x, dy, dw, db, kernel, "conv2d backward filter direct nhwc bf16");
}
void conv2d_backward_filter_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* dy,
                                             float* dw, float* db, DirectNhwcKernel kernel) {
  backward_filter(ctx, sh, x, dy, dw, db, kernel, "conv2d backward filter direct nhwc f16");
}

}  // namespace cnn
