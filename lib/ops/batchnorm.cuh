// Device code shared by the batchnorm kernels (batchnorm_cuda.cu, batchnorm_phased_cuda.cu): the
// per-channel view of an NCHW tensor, the fixed slicing that keeps the sums bitwise repeatable, the
// activation epilogues (NoActivation for plain batchnorm) and the kernels both files launch.
// Trap: slices_for depends on the shape only; sizing slices by occupancy would change the sums.
#pragma once

#include <algorithm>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/activation_math.h"
#include "ops/batchnorm.h"
#include "ops/reduce.cuh"

namespace cnn {

static constexpr int kThreads = 256;

// Channel c's values as a flat range [0, M), M = N*HW: value j sits at (j / HW * C + c) * HW + j % HW.
struct ChannelLayout {
  int64_t C;
  int HW;
  int M;  // N * HW
  cuda::FastDiv32 by_HW;
  __device__ __forceinline__ int64_t at(int c, int j) const {
    const int n = by_HW.div(j);
    return (static_cast<int64_t>(n) * C + c) * HW + (j - n * HW);
  }
};

// The channel of flat element (or float4 group) i: (i / group) % C, group = HW (or HW / 4).
template <typename Div>
__device__ __forceinline__ int channel_of(typename Div::Index i, int C, const Div& by_group, const Div& by_C) {
  const typename Div::Index plane = by_group.div(i);
  return static_cast<int>(plane - by_C.div(plane) * C);
}

// Slice b of gridDim.x slices of [0, M): the same split for every channel.
__device__ __forceinline__ void slice_of(int M, int& begin, int& end) {
  const int per = (M + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  begin = min(M, static_cast<int>(blockIdx.x) * per);
  end = min(M, begin + per);
}

// Slices per channel: at least ~2048 values each, and enough blocks over all channels to fill a
// large GPU. A function of the shape only, so the partial sums (and the result) are reproducible.
inline int slices_for(const BatchnormShape& sh) {
  const int64_t M = sh.N * sh.H * sh.W;
  const int64_t by_size = (M + 2047) / 2048;
  const int64_t by_fill = (1024 + sh.C - 1) / sh.C;
  return static_cast<int>(std::max<int64_t>(1, std::min(by_size, by_fill)));
}

inline ChannelLayout layout_of(const BatchnormShape& sh) {
  return ChannelLayout{sh.C, static_cast<int>(sh.H * sh.W), static_cast<int>(sh.N * sh.H * sh.W),
                       cuda::FastDiv32(sh.H * sh.W)};
}


// Block-sums (s, t) over the block and has thread 0 store them as the (channel c, slice blockIdx.x)
// pair of partial (C, slices, 2). Every thread of the block must call it.
__device__ __forceinline__ void store_slice_sums(double* __restrict__ partial, int c, double s, double t,
                                                 double* shared) {
  s = cuda::block_sum<kThreads>(s, shared);
  t = cuda::block_sum<kThreads>(t, shared);
  if (threadIdx.x == 0) {
    double* out = partial + (static_cast<int64_t>(c) * gridDim.x + blockIdx.x) * 2;
    out[0] = s;
    out[1] = t;
  }
}

// Channel c's slice pairs of partial (C, slices, 2) added in slice order.
__device__ __forceinline__ void sum_slices(const double* __restrict__ partial, int c, int slices, double& s,
                                           double& t) {
  s = 0.0;
  t = 0.0;
  for (int b = 0; b < slices; ++b) {
    s += partial[(static_cast<int64_t>(c) * slices + b) * 2];
    t += partial[(static_cast<int64_t>(c) * slices + b) * 2 + 1];
  }
}

// The kernels' index limits: int32 values per channel, one grid row per channel.
inline void check_cuda_limits(const char* what, const BatchnormShape& sh) {
  if (!cuda::fits_int32(sh.N * sh.H * sh.W) || sh.C > 65535)
    CNN_THROW(
        "{}: {} values per channel over {} channels exceed the CUDA kernels' limits (2^31 values, 65535 "
        "channels: one grid row per channel)",
        what, sh.N * sh.H * sh.W, sh.C);
}

inline unsigned channel_blocks(int64_t C) { return static_cast<unsigned>((C + kThreads - 1) / kThreads); }

// Scratch: partial sums (C * slices * 2 doubles) followed by `floats` per-channel floats.
struct Scratch {
  double* partial;
  float* per_channel;
};
inline Scratch scratch(const ExecContext& ctx, const BatchnormShape& sh, int slices, int64_t floats,
                       const char* what) {
  const size_t partial_bytes = static_cast<size_t>(sh.C) * slices * 2 * sizeof(double);
  char* base = static_cast<char*>(cuda::workspace_bytes(ctx, partial_bytes + floats * sizeof(float), what));
  return Scratch{reinterpret_cast<double*>(base), reinterpret_cast<float*>(base + partial_bytes)};
}

// grid (slices, C): partial sums of d = x - shift[c * shift_stride] and d^2 for each (channel, slice):
// the channel's first value (shift = x, stride HW) or a given per-channel shift (stride 1).
static __global__ void batchnorm_forward_stats_kernel(ChannelLayout L,
                                                      const float* __restrict__ x,      // (N, C, H, W)
                                                      const float* __restrict__ shift,  // see above
                                                      int64_t shift_stride,
                                                      double* __restrict__ partial) {   // (C, slices, 2)
  __shared__ double shared[kThreads / cuda::kWarpSize];
  const int c = blockIdx.y;
  int begin, end;
  slice_of(L.M, begin, end);
  const double k = shift[static_cast<int64_t>(c) * shift_stride];
  double s = 0.0, ss = 0.0;
  for (int j = begin + static_cast<int>(threadIdx.x); j < end; j += kThreads) {
    const double d = static_cast<double>(x[L.at(c, j)]) - k;
    s += d;
    ss += d * d;
  }
  store_slice_sums(partial, c, s, ss, shared);
}

// Inference: (mean, scale) from the running statistics, as batchnorm_forward_infer_cpu.
static __global__ void batchnorm_infer_prepare_kernel(int C, double eps,
                                                          const float* __restrict__ gamma,         // (C)
                                                          const float* __restrict__ running_mean,  // (C)
                                                          const float* __restrict__ running_var,   // (C)
                                                          float* __restrict__ norm_mean,           // (C)
                                                          float* __restrict__ norm_scale) {        // (C)
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  norm_mean[c] = running_mean[c];
  norm_scale[c] = static_cast<float>(gamma[c] / sqrt(static_cast<double>(running_var[c]) + eps));
}

// Epilogues: the identity, or activation K (its switch folds away in each instance).
struct NoActivation {
  __device__ __forceinline__ float forward(float v) const { return v; }
  __device__ __forceinline__ float grad(float y, float dy) const { return dy; }
};
template <ActivationKind K>
struct FusedActivation {
  float alpha;
  __device__ __forceinline__ float forward(float v) const { return activation_forward_value(K, alpha, v); }
  __device__ __forceinline__ float grad(float y, float dy) const {
    return activation_backward_from_output(K, alpha, y, dy);
  }
};

// Calls f(epilogue) with the epilogue object of `act` (null: none).
template <typename F>
static void with_epilogue(const ActivationParams* act, F&& f) {
  if (!act) return f(NoActivation{});
  switch (act->kind) {
    case ActivationKind::relu: return f(FusedActivation<ActivationKind::relu>{act->alpha});
    case ActivationKind::leaky_relu: return f(FusedActivation<ActivationKind::leaky_relu>{act->alpha});
    case ActivationKind::elu: return f(FusedActivation<ActivationKind::elu>{act->alpha});
    case ActivationKind::sigmoid: return f(FusedActivation<ActivationKind::sigmoid>{act->alpha});
    case ActivationKind::tanh: return f(FusedActivation<ActivationKind::tanh>{act->alpha});
  }
  CNN_THROW("batchnorm: unknown fused activation kind {}", static_cast<int>(act->kind));
}


// y = act((x - mean[c]) * scale[c] + beta[c]); float4 groups when HW % 4 == 0 and aligned.
template <typename Div, bool kVec, typename Epi>
static __global__ void batchnorm_forward_normalize_act_kernel(typename Div::Index total, int C, Div by_group,
                                                              Div by_C, Epi epi,
                                                              const float* __restrict__ x,      // (N, C, H, W)
                                                              const float* __restrict__ mean,   // (C)
                                                              const float* __restrict__ scale,  // (C)
                                                              const float* __restrict__ beta,   // (C)
                                                              float* __restrict__ y) {          // (N, C, H, W)
  using I = typename Div::Index;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  const I first = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (kVec) {
    for (I i = first; i < total / 4; i += stride) {
      const int c = channel_of(i, C, by_group, by_C);
      const float m = mean[c], k = scale[c], b = beta[c];
      float4 v = reinterpret_cast<const float4*>(x)[i];
      v.x = epi.forward((v.x - m) * k + b);
      v.y = epi.forward((v.y - m) * k + b);
      v.z = epi.forward((v.z - m) * k + b);
      v.w = epi.forward((v.w - m) * k + b);
      reinterpret_cast<float4*>(y)[i] = v;
    }
  } else {
    for (I i = first; i < total; i += stride) {
      const int c = channel_of(i, C, by_group, by_C);
      y[i] = epi.forward((x[i] - mean[c]) * scale[c] + beta[c]);
    }
  }
}

// grid (slices, C): partial sums of g and g (x - mean), g = act'(y) dy.
template <typename Epi>
static __global__ void batchnorm_backward_stats_act_kernel(ChannelLayout L, Epi epi,
                                                           const float* __restrict__ x,          // (N, C, H, W)
                                                           const float* __restrict__ y,          // (N, C, H, W) or null
                                                           const float* __restrict__ save_mean,  // (C)
                                                           const float* __restrict__ dy,         // (N, C, H, W)
                                                           double* __restrict__ partial) {       // (C, slices, 2)
  __shared__ double shared[kThreads / cuda::kWarpSize];
  const int c = blockIdx.y;
  int begin, end;
  slice_of(L.M, begin, end);
  const float mean = save_mean[c];
  double s = 0.0, sx = 0.0;
  for (int j = begin + static_cast<int>(threadIdx.x); j < end; j += kThreads) {
    const int64_t a = L.at(c, j);
    const double g = epi.grad(y ? y[a] : 0.0f, dy[a]);
    s += g;
    sx += g * static_cast<double>(x[a] - mean);
  }
  store_slice_sums(partial, c, s, sx, shared);
}

template <typename Div, bool kVec, typename Epi>
static __global__ void batchnorm_backward_dx_act_kernel(typename Div::Index total, int C, Div by_group, Div by_C,
                                                        Epi epi,
                                                        const float* __restrict__ x,          // (N, C, H, W)
                                                        const float* __restrict__ y,          // (N, C, H, W) or null
                                                        const float* __restrict__ save_mean,  // (C)
                                                        const float* __restrict__ coef,       // (3, C)
                                                        const float* __restrict__ dy,         // (N, C, H, W)
                                                        float* __restrict__ dx) {             // (N, C, H, W)
  using I = typename Div::Index;
  const I stride = static_cast<I>(gridDim.x) * blockDim.x;
  const I first = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (kVec) {
    for (I i = first; i < total / 4; i += stride) {
      const int c = channel_of(i, C, by_group, by_C);
      const float m = save_mean[c], a = coef[c], b = coef[C + c], k = coef[2 * C + c];
      const float4 xv = reinterpret_cast<const float4*>(x)[i];
      float4 g = reinterpret_cast<const float4*>(dy)[i];
      const float4 yv = y ? reinterpret_cast<const float4*>(y)[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      g.x = epi.grad(yv.x, g.x);
      g.y = epi.grad(yv.y, g.y);
      g.z = epi.grad(yv.z, g.z);
      g.w = epi.grad(yv.w, g.w);
      float4 d;
      d.x = a * (g.x - b - (xv.x - m) * k);
      d.y = a * (g.y - b - (xv.y - m) * k);
      d.z = a * (g.z - b - (xv.z - m) * k);
      d.w = a * (g.w - b - (xv.w - m) * k);
      reinterpret_cast<float4*>(dx)[i] = d;
    }
  } else {
    for (I i = first; i < total; i += stride) {
      const int c = channel_of(i, C, by_group, by_C);
      const float g = epi.grad(y ? y[i] : 0.0f, dy[i]);
      dx[i] = coef[c] * (g - coef[C + c] - (x[i] - save_mean[c]) * coef[2 * C + c]);
    }
  }
}

// An elementwise pass over (N, C, H, W) in int32 with FastDiv32 when the indices fit, else int64;
// float4 when HW % 4 == 0 and `aligned`. launch(total, by_group, by_C, vec tag, blocks).
template <typename F>
static void elementwise(const BatchnormShape& sh, bool aligned, F&& launch) {
  const int64_t total = sh.N * sh.C * sh.H * sh.W, HW = sh.H * sh.W;
  const bool vec = HW % 4 == 0 && aligned;
  const int64_t group = vec ? HW / 4 : HW;
  const unsigned blocks = cuda::grid_blocks(vec ? total / 4 : total, kThreads);
  if (cuda::fits_int32(total + int64_t{blocks} * kThreads)) {
    const cuda::FastDiv32 g(group), c(sh.C);
    if (vec)
      launch(static_cast<int32_t>(total), g, c, std::true_type{}, blocks);
    else
      launch(static_cast<int32_t>(total), g, c, std::false_type{}, blocks);
  } else {
    const cuda::PlainDiv64 g(group), c(sh.C);
    if (vec)
      launch(total, g, c, std::true_type{}, blocks);
    else
      launch(total, g, c, std::false_type{}, blocks);
  }
}


// The normalisation pass y = epi((x - mean[c]) * scale[c] + beta[c]) on `stream`.
template <typename Epi>
static void launch_normalize(cudaStream_t stream, const BatchnormShape& sh, Epi epi, const float* x,
                             const float* mean, const float* scale, const float* beta, float* y) {
  const int C = static_cast<int>(sh.C);
  elementwise(sh, cuda::aligned16(x) && cuda::aligned16(y), [&](auto total, auto g, auto c, auto vec, unsigned blocks) {
    batchnorm_forward_normalize_act_kernel<decltype(g), decltype(vec)::value, Epi>
        <<<blocks, kThreads, 0, stream>>>(total, C, g, c, epi, x, mean, scale, beta, y);
  });
}

// The dx pass dx = a (epi'(y) dy - b - (x - mean) k) on `stream`; y is read only when non-null.
template <typename Epi>
static void launch_dx(cudaStream_t stream, const BatchnormShape& sh, Epi epi, const float* x, const float* y,
                      const float* save_mean, const float* coef, const float* dy, float* dx) {
  const int C = static_cast<int>(sh.C);
  const bool aligned =
      cuda::aligned16(x) && cuda::aligned16(dy) && cuda::aligned16(dx) && (!y || cuda::aligned16(y));
  elementwise(sh, aligned, [&](auto total, auto g, auto c, auto vec, unsigned blocks) {
    batchnorm_backward_dx_act_kernel<decltype(g), decltype(vec)::value, Epi>
        <<<blocks, kThreads, 0, stream>>>(total, C, g, c, epi, x, y, save_mean, coef, dy, dx);
  });
}

}  // namespace cnn
