// Device code shared by the batchnorm kernels (batchnorm_cuda.cu, batchnorm_phased_cuda.cu): the
// per-channel view of an NCHW tensor, the fixed slicing that keeps the sums bitwise repeatable, the
// activation epilogues (NoActivation for plain batchnorm) and the kernels both files launch.
// The sum kernels finish each channel in the block that arrives last among the channel's slices
// (per-channel arrival counters), so a direction needs no separate per-channel kernel: small
// layers are bound by kernel count, not bytes.
// Trap: slices_for depends on the shape only; sizing slices by occupancy would change the sums.
#pragma once

#include <algorithm>
#include <type_traits>
#include <utility>

#include "core/bf16.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "core/fp16.h"
#include "ops/activation_math.h"
#include "ops/batchnorm.h"
#include "ops/elementwise.cuh"
#include "ops/half16.cuh"

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
// The same over float4 groups (H * W % 4 == 0): index j of channel c is a float4 index.
inline ChannelLayout group_layout_of(const BatchnormShape& sh) {
  const int64_t HW4 = sh.H * sh.W / 4;
  return ChannelLayout{sh.C, static_cast<int>(HW4), static_cast<int>(sh.N * HW4), cuda::FastDiv32(HW4)};
}


// An element as a float: FP32 as is, BF16 and F16 widened (exact).
__device__ __forceinline__ float value_of(float v) { return v; }
__device__ __forceinline__ float value_of(bf16 v) { return to_float(v); }
__device__ __forceinline__ float value_of(f16 v) { return Half16<f16>::to_float(v.bits); }

// The shift the forward sums subtract in channel c: p[c * stride]. The channel's first value (x
// NCHW: stride H*W; x channels-last: stride 1) or running_mean (stride 1, the phased sums), minus
// offset[c] when offset is set (the mean offset, batchnorm.h: batchnorm_shift_of's FP32 value).
template <typename T>
struct ChannelShift {
  const T* __restrict__ p;
  int64_t stride;
  const float* __restrict__ offset = nullptr;  // (C) or null
  __device__ __forceinline__ double operator()(int c) const {
    const float v = value_of(p[static_cast<int64_t>(c) * stride]);
    return static_cast<double>(offset ? v - offset[c] : v);
  }
};

// Channel c's slice pairs of partial (C, slices, 2) added in slice order. Loads bypass L1: other
// blocks of the same kernel wrote them.
__device__ __forceinline__ void sum_slices(const double* __restrict__ partial, int c, int slices, double& s,
                                           double& t) {
  s = 0.0;
  t = 0.0;
  for (int b = 0; b < slices; ++b) {
    s += __ldcg(partial + (static_cast<int64_t>(c) * slices + b) * 2);
    t += __ldcg(partial + (static_cast<int64_t>(c) * slices + b) * 2 + 1);
  }
}

// True in the block of channel c's gridDim.x slices that arrives last (cuda::arrive_last).
__device__ __forceinline__ bool last_of_channel(unsigned* __restrict__ counters, int c) {
  return cuda::arrive_last(counters + c, gridDim.x);
}

// One arrival counter per channel.
inline unsigned* channel_counters(const ExecContext& ctx, const BatchnormShape& sh, const char* what) {
  return cuda::arrival_counters(ctx, static_cast<size_t>(sh.C), what);
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

// store_slice_sums, then the channel's last block adds every slice's pair in slice order and calls
// tail(c, s, t) in its thread 0. Every thread of the block must call it.
template <typename Tail>
__device__ __forceinline__ void finish_slice_sums(double* __restrict__ partial, unsigned* __restrict__ counters,
                                                  int c, double s, double t, double* shared, const Tail& tail) {
  store_slice_sums(partial, c, s, t, shared);
  if (last_of_channel(counters, c) && threadIdx.x == 0) {
    sum_slices(partial, c, static_cast<int>(gridDim.x), s, t);
    tail(c, s, t);
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

// This thread's sums over this block's slice of channel c: (sum d, sum d^2), d = x - shift(c).
template <typename Shift>
__device__ __forceinline__ void forward_slice_sums(const ChannelLayout& L, const float* __restrict__ x,
                                                   const Shift& shift, int c, double& s, double& ss) {
  int begin, end;
  slice_of(L.M, begin, end);
  s = 0.0;
  ss = 0.0;
  if (begin < end) {
    const double k = shift(c);
    for (int j = begin + static_cast<int>(threadIdx.x); j < end; j += kThreads) {
      const double d = static_cast<double>(x[L.at(c, j)]) - k;
      s += d;
      ss += d * d;
    }
  }
}

// grid (slices, C): partial sums of d = x - shift(c) and d^2 for each (channel, slice). The
// channel's last block calls tail(c, sum d, sum d^2) in thread 0 with the slices added in order.
template <typename Tail>
static __global__ void batchnorm_forward_stats_kernel(ChannelLayout L,
                                                      const float* __restrict__ x,      // (N, C, H, W)
                                                      ChannelShift<float> shift,
                                                      double* __restrict__ partial,     // (C, slices, 2)
                                                      unsigned* __restrict__ counters,  // (C), zero
                                                      Tail tail) {
  __shared__ double shared[kThreads / cuda::kWarpSize];
  const int c = blockIdx.y;
  double s, ss;
  forward_slice_sums(L, x, shift, c, s, ss);
  finish_slice_sums(partial, counters, c, s, ss, shared, tail);
}

// Tail of the phased sum kernels: the channel's two sums into out (2C + 1), the count by channel 0,
// and (backward) this rank's dgamma = sum g (x - mean) inv_std and dbeta = sum g, when non-null.
struct CollectTail {
  int C;
  double count;
  double* __restrict__ out;                 // (2C + 1)
  const float* __restrict__ save_inv_std;   // (C); read only for dgamma
  float* __restrict__ dgamma;               // (C) or null
  float* __restrict__ dbeta;                // (C) or null
  __device__ void operator()(int c, double a, double b) const {
    out[c] = a;
    out[C + c] = b;
    if (c == 0) out[2 * C] = count;
    if (dgamma) dgamma[c] = static_cast<float>(b * static_cast<double>(save_inv_std[c]));
    if (dbeta) dbeta[c] = static_cast<float>(a);
  }
};

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

// A sign-only activation's epilogue in a backward that takes act' from the recomputed z instead of
// y (batchnorm.h: "A sign-only activation's derivative"): grad(z, dy) is Epi's grad(y, dy), which for
// relu and leaky_relu reads only the sign. The channels-last kernels test kGradFromZ<Epi>.
template <typename Epi>
struct GradFromZ : Epi {};
template <typename Epi>
inline constexpr bool kGradFromZ = false;
template <typename Epi>
inline constexpr bool kGradFromZ<GradFromZ<Epi>> = true;

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

// with_epilogue for a backward: GradFromZ's epilogue when `from_z` (act sign-only, beta given), else
// act's own.
template <typename F>
static void with_grad_epilogue(const ActivationParams* act, bool from_z, F&& f) {
  if (from_z && act && act->kind == ActivationKind::relu)
    return f(GradFromZ<FusedActivation<ActivationKind::relu>>{{act->alpha}});
  if (from_z && act && act->kind == ActivationKind::leaky_relu)
    return f(GradFromZ<FusedActivation<ActivationKind::leaky_relu>>{{act->alpha}});
  with_epilogue(act, std::forward<F>(f));
}


// This thread's sums over this block's slice of channel c: (sum g, sum g (x - mean)), g = act'(y) dy
// (y read only when non-null).
template <typename Epi>
__device__ __forceinline__ void backward_slice_sums(const ChannelLayout& L, const Epi& epi,
                                                    const float* __restrict__ x, const float* __restrict__ y,
                                                    const float* __restrict__ save_mean,
                                                    const float* __restrict__ dy, int c, double& s, double& sx) {
  int begin, end;
  slice_of(L.M, begin, end);
  s = 0.0;
  sx = 0.0;
  if (begin < end) {
    const float mean = save_mean[c];
    for (int j = begin + static_cast<int>(threadIdx.x); j < end; j += kThreads) {
      const int64_t a = L.at(c, j);
      const double g = epi.grad(y ? y[a] : 0.0f, dy[a]);
      s += g;
      sx += g * static_cast<double>(x[a] - mean);
    }
  }
}

// grid (slices, C): partial sums of g and g (x - mean), g = act'(y) dy; the channel's last block
// calls tail(c, sum g, sum g (x - mean)) in thread 0 with the slices added in order.
template <typename Epi, typename Tail>
static __global__ void batchnorm_backward_stats_act_kernel(ChannelLayout L, Epi epi,
                                                           const float* __restrict__ x,          // (N, C, H, W)
                                                           const float* __restrict__ y,          // (N, C, H, W) or null
                                                           const float* __restrict__ save_mean,  // (C)
                                                           const float* __restrict__ dy,         // (N, C, H, W)
                                                           double* __restrict__ partial,         // (C, slices, 2)
                                                           unsigned* __restrict__ counters,      // (C), zero
                                                           Tail tail) {
  __shared__ double shared[kThreads / cuda::kWarpSize];
  const int c = blockIdx.y;
  double s, sx;
  backward_slice_sums(L, epi, x, y, save_mean, dy, c, s, sx);
  finish_slice_sums(partial, counters, c, s, sx, shared, tail);
}

// This block's slice of channel c (grid (slices, C)): f(i) for each index i, of a value or (when L
// is group_layout_of) of a float4 group.
template <typename F>
__device__ __forceinline__ void for_slice(const ChannelLayout& L, int c, F&& f) {
  int begin, end;
  slice_of(L.M, begin, end);
  for (int j = begin + static_cast<int>(threadIdx.x); j < end; j += kThreads) f(L.at(c, j));
}

// y = epi((x - m) k + b) over this block's slice of channel c.
template <bool kVec, typename Epi>
__device__ __forceinline__ void normalize_slice(const ChannelLayout& L, const Epi& epi, int c, float m, float k,
                                                float b, const float* __restrict__ x, float* __restrict__ y) {
  for_slice(L, c, [&](int64_t i) {
    if (kVec) {
      cuda::store4(y, i, cuda::map4([&](float v) { return epi.forward((v - m) * k + b); }, cuda::load4(x, i)));
    } else {
      y[i] = epi.forward((x[i] - m) * k + b);
    }
  });
}

// grid (slices, C): y = epi((x - m) k + beta[c]) over channel c's slice. Thread 0 of each block gets
// the channel's (m, k) from pro.begin(c, m, k); with counters, thread 0 of the channel's last block
// then calls pro.finish(c) (every block has read what begin reads by then). M = 0 touches no x or y.
template <bool kVec, typename Epi, typename Pro>
static __global__ void batchnorm_normalize_kernel(ChannelLayout L, Epi epi, Pro pro,
                                                  const float* __restrict__ x,      // (N, C, H, W)
                                                  const float* __restrict__ beta,   // (C)
                                                  float* __restrict__ y,            // (N, C, H, W)
                                                  unsigned* __restrict__ counters)  // (C), zero; or null
{
  __shared__ float norm[2];
  const int c = blockIdx.y;
  if (threadIdx.x == 0) pro.begin(c, norm[0], norm[1]);
  __syncthreads();
  if (L.M > 0) normalize_slice<kVec>(L, epi, c, norm[0], norm[1], beta[c], x, y);
  if (counters && last_of_channel(counters, c) && threadIdx.x == 0) pro.finish(c);
}

// A normalize prologue from per-channel arrays (mean, scale), with nothing to finish.
struct NormFromArrays {
  const float* __restrict__ mean;   // (C)
  const float* __restrict__ scale;  // (C)
  __device__ void begin(int c, float& m, float& k) const {
    m = mean[c];
    k = scale[c];
  }
  __device__ void finish(int) const {}
};

// dx = a (g - b - (x - m) k), g = epi'(y) dy (y read only when non-null), over this block's slice of
// channel c.
template <bool kVec, typename Epi>
__device__ __forceinline__ void dx_slice(const ChannelLayout& L, const Epi& epi, int c, float a, float b, float k,
                                         float m, const float* __restrict__ x, const float* __restrict__ y,
                                         const float* __restrict__ dy, float* __restrict__ dx) {
  for_slice(L, c, [&](int64_t i) {
    if (kVec) {
      const float4 xv = cuda::load4(x, i);
      const float4 yv = y ? cuda::load4(y, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      const float4 g = cuda::map4([&](float ye, float ge) { return epi.grad(ye, ge); }, yv, cuda::load4(dy, i));
      cuda::store4(dx, i, cuda::map4([&](float xe, float ge) { return a * (ge - b - (xe - m) * k); }, xv, g));
    } else {
      dx[i] = a * (epi.grad(y ? y[i] : 0.0f, dy[i]) - b - (x[i] - m) * k);
    }
  });
}

// grid (slices, C): dx = a (g - b - (x - save_mean[c]) k), g = epi'(y) dy (y read only when
// non-null), over channel c's slice; thread 0 of each block gets (a, b, k) from coef(c, abk).
template <bool kVec, typename Epi, typename Coef>
static __global__ void batchnorm_dx_kernel(ChannelLayout L, Epi epi, Coef coef,
                                           const float* __restrict__ save_mean,  // (C)
                                           const float* __restrict__ x,          // (N, C, H, W)
                                           const float* __restrict__ y,          // (N, C, H, W) or null
                                           const float* __restrict__ dy,         // (N, C, H, W)
                                           float* __restrict__ dx) {             // (N, C, H, W)
  __shared__ float abkm[4];
  const int c = blockIdx.y;
  if (threadIdx.x == 0) {
    coef(c, abkm);
    abkm[3] = save_mean[c];
  }
  __syncthreads();
  dx_slice<kVec>(L, epi, c, abkm[0], abkm[1], abkm[2], abkm[3], x, y, dy, dx);
}

// (a, b, k) of the dx pass from a (3, C) array.
struct CoefFromArray {
  int C;
  const float* __restrict__ coef;  // (3, C)
  __device__ void operator()(int c, float* abk) const {
    abk[0] = coef[c];
    abk[1] = coef[C + c];
    abk[2] = coef[2 * C + c];
  }
};

// Launches a grid (slices, C) pass: launch(layout, grid, vec tag) with the float4-group layout when
// H * W % 4 == 0 and `aligned`, else the value layout.
template <typename F>
static void per_channel(const BatchnormShape& sh, bool aligned, F&& launch) {
  const dim3 grid(static_cast<unsigned>(slices_for(sh)), static_cast<unsigned>(sh.C));
  if ((sh.H * sh.W) % 4 == 0 && aligned)
    launch(group_layout_of(sh), grid, std::true_type{});
  else
    launch(layout_of(sh), grid, std::false_type{});
}

// The normalisation pass on `stream` (see batchnorm_normalize_kernel).
template <typename Epi, typename Pro>
static void launch_normalize(cudaStream_t stream, const BatchnormShape& sh, Epi epi, Pro pro, const float* x,
                             const float* beta, float* y, unsigned* counters) {
  per_channel(sh, cuda::aligned16(x) && cuda::aligned16(y), [&](const ChannelLayout& L, dim3 grid, auto vec) {
    batchnorm_normalize_kernel<decltype(vec)::value, Epi, Pro>
        <<<grid, kThreads, 0, stream>>>(L, epi, pro, x, beta, y, counters);
  });
}

// The dx pass on `stream` (see batchnorm_dx_kernel); y is read only when non-null.
template <typename Epi, typename Coef>
static void launch_dx(cudaStream_t stream, const BatchnormShape& sh, Epi epi, Coef coef, const float* save_mean,
                      const float* x, const float* y, const float* dy, float* dx) {
  const bool aligned =
      cuda::aligned16(x) && cuda::aligned16(dy) && cuda::aligned16(dx) && (!y || cuda::aligned16(y));
  per_channel(sh, aligned, [&](const ChannelLayout& L, dim3 grid, auto vec) {
    batchnorm_dx_kernel<decltype(vec)::value, Epi, Coef>
        <<<grid, kThreads, 0, stream>>>(L, epi, coef, save_mean, x, y, dy, dx);
  });
}

}  // namespace cnn
