// Direct BF16 convolutions on the GPU for filters that read one input channel (see
// conv2d_direct_bf16.h): plain FP32 sums over each window, no tensor cores (these layers are bound
// by memory and launch count, not arithmetic). Consecutive threads take consecutive output (or
// input) columns, so loads and stores coalesce along w.
// Trap: input channel of output channel k is k / (K / C) (the channel multiplier), C == 1 included.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d_direct_bf16.h"
#include "ops/conv2d_direct_bf16_sum.h"
#include "ops/conv2d_igemm_bf16_decode.h"
#include "ops/reduce.cuh"

namespace cnn {

using igemm_bf16_detail::Div;
using igemm_bf16_detail::for_each_data_tap;

struct DirectBf16Params {
  Div div_q, div_p, div_k, div_w, div_h, div_c, div_s, div_sh, div_sw, div_pq, div_taps;
  int C, H, W, K, P, Q, R, S, sh, sw, ph, pw, dh, dw, mult;
};

__device__ __forceinline__ float bf(uint16_t v) { return float_from_bf16_bits(v); }

// i = ((d * C + c) * B + b) * A + a -> a, b, c, d (da, db, dc divide by A, B, C).
__device__ __forceinline__ void unflatten(const Div& da, const Div& db, const Div& dc, int i, int& a, int& b, int& c,
                                          int& d) {
  da.divmod(i, i, a);
  db.divmod(i, i, b);
  dc.divmod(i, d, c);
}

static __global__ void conv2d_forward_direct_bf16_kernel(const DirectBf16Params d, int total,
                                                         const uint16_t* __restrict__ x,  // (N, C, H, W)
                                                         const uint16_t* __restrict__ w,  // (K, 1, R, S)
                                                         const float* __restrict__ b,     // (K) or null
                                                         uint16_t* __restrict__ y) {      // (N, K, P, Q)
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += int(gridDim.x * blockDim.x)) {
    int q, p, k, n;
    unflatten(d.div_q, d.div_p, d.div_k, i, q, p, k, n);
    const uint16_t* xp = x + (int64_t(n) * d.C + k / d.mult) * d.H * d.W;
    const uint16_t* wp = w + k * d.R * d.S;
    const int h0 = p * d.sh - d.ph, w0 = q * d.sw - d.pw;
    float acc = 0.0f;
    for (int r = 0; r < d.R; ++r) {
      const int h = h0 + r * d.dh;
      if (unsigned(h) >= unsigned(d.H)) continue;
      for (int s = 0; s < d.S; ++s) {
        const int ww = w0 + s * d.dw;
        if (unsigned(ww) < unsigned(d.W)) acc += bf(__ldg(xp + h * d.W + ww)) * bf(__ldg(wp + r * d.S + s));
      }
    }
    if (b) acc += __ldg(b + k);
    y[i] = bf16_bits_from_float(acc);
  }
}

static __global__ void conv2d_backward_data_direct_bf16_kernel(const DirectBf16Params d, int total,
                                                               const uint16_t* __restrict__ w,   // (K, 1, R, S)
                                                               const uint16_t* __restrict__ dy,  // (N, K, P, Q)
                                                               uint16_t* __restrict__ dx) {      // (N, C, H, W)
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < total; i += int(gridDim.x * blockDim.x)) {
    int ww, h, c, n;
    unflatten(d.div_w, d.div_h, d.div_c, i, ww, h, c, n);
    float acc = 0.0f;
    for (int m = 0; m < d.mult; ++m) {
      const int k = c * d.mult + m;
      const uint16_t* dyp = dy + (int64_t(n) * d.K + k) * d.P * d.Q;
      const uint16_t* wp = w + k * d.R * d.S;
      for_each_data_tap(d, h, ww, [&](int r, int s, int p, int q) {
        acc += bf(__ldg(dyp + p * d.Q + q)) * bf(__ldg(wp + r * d.S + s));
      });
    }
    dx[i] = bf16_bits_from_float(acc);
  }
}

// Partial (slice, k, tap) = sum over the slice's positions of dy[n, k, p, q] * x under tap (r, s)
// of channel k / mult; tap R*S is the bias (x := 1). One block per (k, tap) and slice.
template <int kThreads>
static __global__ void __launch_bounds__(kThreads)
    conv2d_backward_filter_direct_bf16_kernel(const DirectBf16Params d, int npq, int per_slice,
                                              const uint16_t* __restrict__ x,   // (N, C, H, W)
                                              const uint16_t* __restrict__ dy,  // (N, K, P, Q)
                                              float* __restrict__ parts) {      // (slices, K, R*S + 1)
  __shared__ float scratch[kThreads / 32];
  int k, tap, r = 0, s = 0;
  d.div_taps.divmod(int(blockIdx.x), k, tap);
  const bool bias = tap == d.R * d.S;
  if (!bias) d.div_s.divmod(tap, r, s);
  const int begin = int(blockIdx.y) * per_slice, end = min(npq, begin + per_slice);
  const int64_t xc = int64_t(k / d.mult) * d.H * d.W, CHW = int64_t(d.C) * d.H * d.W;
  float acc = 0.0f;
  for (int j = begin + int(threadIdx.x); j < end; j += kThreads) {
    int n, pq, p, q;
    d.div_pq.divmod(j, n, pq);
    d.div_q.divmod(pq, p, q);
    const float g = bf(__ldg(dy + (int64_t(n) * d.K + k) * d.P * d.Q + pq));
    if (bias) {
      acc += g;
      continue;
    }
    const int h = p * d.sh - d.ph + r * d.dh, ww = q * d.sw - d.pw + s * d.dw;
    if (unsigned(h) < unsigned(d.H) && unsigned(ww) < unsigned(d.W))
      acc += g * bf(__ldg(x + n * CHW + xc + h * d.W + ww));
  }
  acc = cuda::block_sum<kThreads>(acc, scratch);
  if (threadIdx.x == 0) parts[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = acc;
}

// The same partials for a kR x kS window (the FER models' 3x3), all taps and the bias of channel k
// in one pass over the slice of dy: one block per (k, slice), kR*kS + 1 register sums.
template <int kThreads, int kR, int kS>
static __global__ void __launch_bounds__(kThreads)
    conv2d_backward_filter_direct_bf16_window_kernel(const DirectBf16Params d, int npq, int per_slice,
                                                     const uint16_t* __restrict__ x,   // (N, C, H, W)
                                                     const uint16_t* __restrict__ dy,  // (N, K, P, Q)
                                                     float* __restrict__ parts) {      // (slices, K, kR*kS + 1)
  constexpr int kTaps = kR * kS + 1;
  __shared__ float scratch[kThreads / 32];
  const int k = int(blockIdx.x), begin = int(blockIdx.y) * per_slice, end = min(npq, begin + per_slice);
  const int64_t xc = int64_t(k / d.mult) * d.H * d.W, CHW = int64_t(d.C) * d.H * d.W;
  float acc[kTaps] = {};
  for (int j = begin + int(threadIdx.x); j < end; j += kThreads) {
    int n, pq, p, q;
    d.div_pq.divmod(j, n, pq);
    d.div_q.divmod(pq, p, q);
    const float g = bf(__ldg(dy + (int64_t(n) * d.K + k) * d.P * d.Q + pq));
    acc[kTaps - 1] += g;
    const uint16_t* xp = x + n * CHW + xc;
    const int h0 = p * d.sh - d.ph, w0 = q * d.sw - d.pw;
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const int h = h0 + r * d.dh;
#pragma unroll
      for (int s = 0; s < kS; ++s) {
        const int ww = w0 + s * d.dw;
        if (unsigned(h) < unsigned(d.H) && unsigned(ww) < unsigned(d.W))
          acc[r * kS + s] += g * bf(__ldg(xp + h * d.W + ww));
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kTaps; ++t) {
    const float v = cuda::block_sum<kThreads>(acc[t], scratch);
    if (threadIdx.x == 0) parts[(int64_t(blockIdx.y) * d.K + k) * kTaps + t] = v;
  }
}

// dw[k, tap] and db[k] = the sum over slices of parts (slices, K, R*S + 1), in a fixed order: block
// = 32 consecutive outputs (coalesced reads) x kSumGroups slice groups; group w sums slices w,
// w + kSumGroups, ... in order, then one thread an output adds the groups in order. Many short
// sums in flight instead of one thread walking all slices (latency-bound with hundreds of them).
constexpr int kSumGroups = 32;
static __global__ void __launch_bounds__(32 * kSumGroups)
    conv2d_backward_filter_direct_bf16_sum_kernel(const float* __restrict__ parts, int slices, Div div_taps, int count,
                                                  float* __restrict__ dw, float* __restrict__ db) {
  __shared__ float part[kSumGroups][33];
  const int o = int(threadIdx.x) % 32, grp = int(threadIdx.x) / 32, i = int(blockIdx.x) * 32 + o;
  float sum = 0.0f;
  if (i < count) {
#pragma unroll 4
    for (int j = grp; j < slices; j += kSumGroups) sum += parts[int64_t(j) * count + i];
  }
  part[grp][o] = sum;
  __syncthreads();
  if (grp != 0 || i >= count) return;
  sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kSumGroups; ++w) sum += part[w][o];
  int k, tap;
  div_taps.divmod(i, k, tap);
  const int taps = int(div_taps.d) - 1;
  if (tap < taps && dw) dw[k * taps + tap] = sum;
  if (tap == taps && db) db[k] = sum;
}

static DirectBf16Params direct_params(const Conv2dShape& sh) {
  const int taps = int(sh.R * sh.S) + 1;
  return {Div(sh.Q), Div(sh.P), Div(sh.K), Div(sh.W), Div(sh.H), Div(sh.C), Div(sh.S), Div(sh.stride_h),
          Div(sh.stride_w), Div(sh.P * sh.Q), Div(taps), int(sh.C), int(sh.H), int(sh.W), int(sh.K), int(sh.P),
          int(sh.Q), int(sh.R), int(sh.S), sh.stride_h, sh.stride_w, sh.pad_h, sh.pad_w, sh.dilation_h,
          sh.dilation_w, int(sh.K / sh.C)};
}

static cudaStream_t checked_stream(const ExecContext& ctx, const Conv2dShape& sh, const char* what) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  if (!conv2d_direct_bf16_can_implement(sh))
    CNN_THROW("{}: cannot implement {} (needs C / groups == 1 and tensors under 2^31 elements)", what,
              sh.to_string());
  return stream;
}

void conv2d_forward_direct_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x, const bf16* w,
                                     const float* b, bf16* y) {
  const char* what = "conv2d forward direct bf16";
  cudaStream_t stream = checked_stream(ctx, sh, what);
  const int total = int(sh.N * sh.K * sh.P * sh.Q);
  conv2d_forward_direct_bf16_kernel<<<cuda::grid_blocks(total, 256), 256, 0, stream>>>(
      direct_params(sh), total, reinterpret_cast<const uint16_t*>(x), reinterpret_cast<const uint16_t*>(w), b,
      reinterpret_cast<uint16_t*>(y));
  CUDA_CHECK_LAUNCH(what);
}

void conv2d_backward_data_direct_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* w,
                                           const bf16* dy, bf16* dx) {
  const char* what = "conv2d backward data direct bf16";
  cudaStream_t stream = checked_stream(ctx, sh, what);
  const int total = int(sh.N * sh.C * sh.H * sh.W);
  conv2d_backward_data_direct_bf16_kernel<<<cuda::grid_blocks(total, 256), 256, 0, stream>>>(
      direct_params(sh), total, reinterpret_cast<const uint16_t*>(w), reinterpret_cast<const uint16_t*>(dy),
      reinterpret_cast<uint16_t*>(dx));
  CUDA_CHECK_LAUNCH(what);
}

void conv2d_backward_filter_direct_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x,
                                             const bf16* dy, float* dw, float* db) {
  const char* what = "conv2d backward filter direct bf16";
  cudaStream_t stream = checked_stream(ctx, sh, what);
  if (!dw && !db) return;
  const int slices = conv2d_direct_bf16_filter_slices(sh), taps = int(sh.R * sh.S) + 1, npq = int(sh.N * sh.P * sh.Q);
  auto* parts = static_cast<float*>(cuda::workspace_bytes(ctx, conv2d_direct_bf16_workspace_bytes(sh), what));
  const DirectBf16Params d = direct_params(sh);
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  const auto* dys = reinterpret_cast<const uint16_t*>(dy);
  const int per_slice = (npq + slices - 1) / slices;
  if (sh.R == 3 && sh.S == 3)
    conv2d_backward_filter_direct_bf16_window_kernel<256, 3, 3>
        <<<dim3(unsigned(sh.K), unsigned(slices)), 256, 0, stream>>>(d, npq, per_slice, xs, dys, parts);
  else
    conv2d_backward_filter_direct_bf16_kernel<256>
        <<<dim3(unsigned(sh.K * taps), unsigned(slices)), 256, 0, stream>>>(d, npq, per_slice, xs, dys, parts);
  CUDA_CHECK_LAUNCH(what);
  conv2d_direct_bf16_sum_slices_cuda(stream, parts, slices, int(sh.K), taps, dw, db, what);
}

void conv2d_direct_bf16_sum_slices_cuda(cudaStream_t stream, const float* parts, int slices, int K, int taps,
                                        float* dw, float* db, const char* what) {
  const int count = K * taps;
  conv2d_backward_filter_direct_bf16_sum_kernel<<<unsigned((count + 31) / 32), 32 * kSumGroups, 0, stream>>>(
      parts, slices, Div(taps), count, dw, db);
  CUDA_CHECK_LAUNCH(what);
}

}  // namespace cnn
