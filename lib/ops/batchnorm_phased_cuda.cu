// Phased batchnorm on the GPU (see batchnorm.h): the same fixed-slice double sums as
// batchnorm_cuda.cu, about a shift every rank shares (running_mean), written as (2C + 1) doubles a
// caller may all-reduce over the ranks; then finalize + one elementwise pass with the activation
// folded into its epilogue (forward) or into its read of dy (backward, from the saved y).
// Trap: N may be 0 (a rank without samples still joins the reductions): kernels then see no values,
// and the sums are zeros with count 0; the elementwise passes are skipped.
#include <algorithm>
#include <type_traits>

#include "core/cuda_check.h"
#include "ops/activation_math.h"
#include "ops/batchnorm.h"
#include "ops/batchnorm.cuh"
#include "ops/reduce.cuh"

namespace cnn {

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

// grid (slices, C): partial sums of d = x - shift[c] and d^2 for each (channel, slice).
static __global__ void batchnorm_forward_stats_shifted_kernel(ChannelLayout L,
                                                              const float* __restrict__ x,      // (N, C, H, W)
                                                              const float* __restrict__ shift,  // (C)
                                                              double* __restrict__ partial) {   // (C, slices, 2)
  __shared__ double shared[kThreads / cuda::kWarpSize];
  const int c = blockIdx.y;
  int begin, end;
  slice_of(L.M, begin, end);
  const double k = shift[c];
  double s = 0.0, ss = 0.0;
  for (int j = begin + static_cast<int>(threadIdx.x); j < end; j += kThreads) {
    const double d = static_cast<double>(x[L.at(c, j)]) - k;
    s += d;
    ss += d * d;
  }
  s = cuda::block_sum<kThreads>(s, shared);
  ss = cuda::block_sum<kThreads>(ss, shared);
  if (threadIdx.x == 0) {
    double* out = partial + (static_cast<int64_t>(c) * gridDim.x + blockIdx.x) * 2;
    out[0] = s;
    out[1] = ss;
  }
}

// One thread per channel: the slices in slice order into out (2C + 1); thread 0 writes the count.
static __global__ void batchnorm_phase_collect_kernel(int C, int slices, double count,
                                                      const double* __restrict__ partial,  // (C, slices, 2)
                                                      double* __restrict__ out) {          // (2C + 1)
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c == 0) out[2 * C] = count;
  if (c >= C) return;
  double a = 0.0, b = 0.0;
  for (int s = 0; s < slices; ++s) {
    a += partial[(static_cast<int64_t>(c) * slices + s) * 2];
    b += partial[(static_cast<int64_t>(c) * slices + s) * 2 + 1];
  }
  out[c] = a;
  out[C + c] = b;
}

// One thread per channel, from the summed stats: as batchnorm_forward_apply_cpu.
static __global__ void batchnorm_forward_apply_finalize_kernel(int C, double eps, double momentum,
                                                               const double* __restrict__ stats,   // (2C + 1)
                                                               const float* __restrict__ gamma,    // (C)
                                                               float* __restrict__ running_mean,   // (C)
                                                               float* __restrict__ running_var,    // (C)
                                                               float* __restrict__ save_mean,      // (C)
                                                               float* __restrict__ save_inv_std,   // (C)
                                                               float* __restrict__ norm_scale) {   // (C)
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double m = stats[2 * C];
  const double d_mean = stats[c] / m;
  const double mean = static_cast<double>(running_mean[c]) + d_mean;
  const double var = fmax(0.0, stats[C + c] / m - d_mean * d_mean);
  const double inv_std = 1.0 / sqrt(var + eps);
  const double unbiased = var * m / (m - 1.0);
  running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
  running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
  save_mean[c] = static_cast<float>(mean);
  save_inv_std[c] = static_cast<float>(inv_std);
  norm_scale[c] = static_cast<float>(static_cast<double>(gamma[c]) * inv_std);
}

// Inference: (mean, scale) from the running statistics, as batchnorm_forward_infer_cpu.
static __global__ void batchnorm_infer_act_prepare_kernel(int C, double eps,
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
  s = cuda::block_sum<kThreads>(s, shared);
  sx = cuda::block_sum<kThreads>(sx, shared);
  if (threadIdx.x == 0) {
    double* out = partial + (static_cast<int64_t>(c) * gridDim.x + blockIdx.x) * 2;
    out[0] = s;
    out[1] = sx;
  }
}

// One thread per channel: this rank's dgamma and dbeta from its own (not yet summed) sums.
static __global__ void batchnorm_backward_local_grads_kernel(int C,
                                                             const double* __restrict__ sums,         // (2C + 1)
                                                             const float* __restrict__ save_inv_std,  // (C)
                                                             float* __restrict__ dgamma,              // (C) or null
                                                             float* __restrict__ dbeta) {             // (C) or null
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  if (dgamma) dgamma[c] = static_cast<float>(sums[C + c] * static_cast<double>(save_inv_std[c]));
  if (dbeta) dbeta[c] = static_cast<float>(sums[c]);
}

// One thread per channel: coefficients of dx = a (g - b - (x - mean) k) from the summed sums.
static __global__ void batchnorm_backward_apply_coef_kernel(int C,
                                                            const double* __restrict__ sums,         // (2C + 1)
                                                            const float* __restrict__ gamma,         // (C)
                                                            const float* __restrict__ save_inv_std,  // (C)
                                                            float* __restrict__ coef) {              // (3, C)
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const double m = sums[2 * C];
  const double inv_std = save_inv_std[c];
  const double sum_g_xhat = sums[C + c] * inv_std;
  coef[c] = static_cast<float>(gamma[c] * inv_std);
  coef[C + c] = static_cast<float>(sums[c] / m);
  coef[2 * C + c] = static_cast<float>(inv_std * sum_g_xhat / m);
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

static void check_phase_shape(const char* what, const BatchnormShape& sh) {
  if (sh.N < 0 || sh.C <= 0 || sh.H <= 0 || sh.W <= 0)
    CNN_THROW("{}: sizes must be positive (N may be 0), got N={} C={} H={} W={}", what, sh.N, sh.C, sh.H, sh.W);
  if (!cuda::fits_int32(sh.N * sh.H * sh.W) || sh.C > 65535)
    CNN_THROW(
        "{}: {} values per channel over {} channels exceed the CUDA kernels' limits (2^31 values, 65535 "
        "channels: one grid row per channel)",
        what, sh.N * sh.H * sh.W, sh.C);
}

static unsigned channel_blocks(int64_t C) { return static_cast<unsigned>((C + kThreads - 1) / kThreads); }

static double* partial_scratch(const ExecContext& ctx, const BatchnormShape& sh, int slices, int64_t floats,
                               float** per_channel, const char* what) {
  const size_t partial_bytes = static_cast<size_t>(sh.C) * slices * 2 * sizeof(double);
  char* base = static_cast<char*>(cuda::workspace_bytes(ctx, partial_bytes + floats * sizeof(float), what));
  if (per_channel) *per_channel = reinterpret_cast<float*>(base + partial_bytes);
  return reinterpret_cast<double*>(base);
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

void batchnorm_forward_stats_cuda(const ExecContext& ctx, const BatchnormShape& sh,
                                  const float* x,             // (N, C, H, W)
                                  const float* running_mean,  // (C): the shift
                                  double* stats) {            // (2C + 1)
  const char* what = "batchnorm forward statistics";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_phase_shape(what, sh);
  const int slices = slices_for(sh), C = static_cast<int>(sh.C);
  double* partial = partial_scratch(ctx, sh, slices, 0, nullptr, what);
  batchnorm_forward_stats_shifted_kernel<<<dim3(slices, C), kThreads, 0, stream>>>(layout_of(sh), x, running_mean,
                                                                                   partial);
  CUDA_CHECK_LAUNCH("batchnorm forward statistics (sums)");
  batchnorm_phase_collect_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(
      C, slices, static_cast<double>(sh.N * sh.H * sh.W), partial, stats);
  CUDA_CHECK_LAUNCH("batchnorm forward statistics (collect)");
}

void batchnorm_forward_apply_cuda(const ExecContext& ctx, const BatchnormShape& sh,
                                  const double* stats,          // (2C + 1), summed over the ranks
                                  const float* x,               // (N, C, H, W)
                                  const float* gamma,           // (C)
                                  const float* beta,            // (C)
                                  const ActivationParams* act,  // or null
                                  float* y,                     // (N, C, H, W)
                                  float* running_mean,          // (C)
                                  float* running_var,           // (C)
                                  float* save_mean,             // (C)
                                  float* save_inv_std) {        // (C)
  const char* what = "batchnorm forward";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_phase_shape(what, sh);
  const int C = static_cast<int>(sh.C);
  float* scale = static_cast<float*>(cuda::workspace_bytes(ctx, sh.C * sizeof(float), what));
  // The count over all ranks lives on the device; a count below 2 gives var * m / (m - 1) = inf or
  // NaN in the running variance, which the trainer's non-finite check reports.
  batchnorm_forward_apply_finalize_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(
      C, sh.eps, sh.momentum, stats, gamma, running_mean, running_var, save_mean, save_inv_std, scale);
  CUDA_CHECK_LAUNCH("batchnorm forward (finalize)");
  if (sh.N == 0) return;
  with_epilogue(act, [&](auto epi) {
    elementwise(sh, cuda::aligned16(x) && cuda::aligned16(y), [&](auto total, auto g, auto c, auto vec, unsigned blocks) {
      batchnorm_forward_normalize_act_kernel<decltype(g), decltype(vec)::value, decltype(epi)>
          <<<blocks, kThreads, 0, stream>>>(total, C, g, c, epi, x, save_mean, scale, beta, y);
    });
  });
  CUDA_CHECK_LAUNCH("batchnorm forward (normalize)");
}

void batchnorm_forward_infer_act_cuda(const ExecContext& ctx, const BatchnormShape& sh,
                                      const float* x,               // (N, C, H, W)
                                      const float* gamma,           // (C)
                                      const float* beta,            // (C)
                                      const float* running_mean,    // (C)
                                      const float* running_var,     // (C)
                                      const ActivationParams* act,  // or null
                                      float* y) {                   // (N, C, H, W)
  const char* what = "batchnorm inference";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_phase_shape(what, sh);
  const int C = static_cast<int>(sh.C);
  float* per_channel = static_cast<float*>(cuda::workspace_bytes(ctx, 2 * sh.C * sizeof(float), what));
  batchnorm_infer_act_prepare_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(C, sh.eps, gamma, running_mean,
                                                                                 running_var, per_channel,
                                                                                 per_channel + C);
  CUDA_CHECK_LAUNCH("batchnorm inference (prepare)");
  if (sh.N == 0) return;
  with_epilogue(act, [&](auto epi) {
    elementwise(sh, cuda::aligned16(x) && cuda::aligned16(y), [&](auto total, auto g, auto c, auto vec, unsigned blocks) {
      batchnorm_forward_normalize_act_kernel<decltype(g), decltype(vec)::value, decltype(epi)>
          <<<blocks, kThreads, 0, stream>>>(total, C, g, c, epi, x, per_channel, per_channel + C, beta, y);
    });
  });
  CUDA_CHECK_LAUNCH("batchnorm inference (normalize)");
}

void batchnorm_backward_stats_cuda(const ExecContext& ctx, const BatchnormShape& sh,
                                   const float* x,               // (N, C, H, W)
                                   const float* y,               // (N, C, H, W); read only with act
                                   const ActivationParams* act,  // or null
                                   const float* save_mean,       // (C)
                                   const float* save_inv_std,    // (C)
                                   const float* dy,              // (N, C, H, W)
                                   double* sums,                 // (2C + 1)
                                   float* dgamma,                // (C) or null
                                   float* dbeta) {               // (C) or null
  const char* what = "batchnorm backward statistics";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_phase_shape(what, sh);
  const int slices = slices_for(sh), C = static_cast<int>(sh.C);
  double* partial = partial_scratch(ctx, sh, slices, 0, nullptr, what);
  const float* y_read = act ? y : nullptr;
  with_epilogue(act, [&](auto epi) {
    batchnorm_backward_stats_act_kernel<<<dim3(slices, C), kThreads, 0, stream>>>(layout_of(sh), epi, x, y_read,
                                                                                  save_mean, dy, partial);
  });
  CUDA_CHECK_LAUNCH("batchnorm backward statistics (sums)");
  batchnorm_phase_collect_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(
      C, slices, static_cast<double>(sh.N * sh.H * sh.W), partial, sums);
  CUDA_CHECK_LAUNCH("batchnorm backward statistics (collect)");
  if (dgamma || dbeta) {
    batchnorm_backward_local_grads_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(C, sums, save_inv_std, dgamma,
                                                                                      dbeta);
    CUDA_CHECK_LAUNCH("batchnorm backward statistics (dgamma, dbeta)");
  }
}

void batchnorm_backward_apply_cuda(const ExecContext& ctx, const BatchnormShape& sh,
                                   const double* sums,           // (2C + 1), summed over the ranks
                                   const float* x,               // (N, C, H, W)
                                   const float* y,               // (N, C, H, W); read only with act
                                   const ActivationParams* act,  // or null
                                   const float* gamma,           // (C)
                                   const float* save_mean,       // (C)
                                   const float* save_inv_std,    // (C)
                                   const float* dy,              // (N, C, H, W)
                                   float* dx) {                  // (N, C, H, W) or null
  const char* what = "batchnorm backward";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_phase_shape(what, sh);
  if (sh.N == 0 || !dx) return;
  const int C = static_cast<int>(sh.C);
  float* coef = static_cast<float*>(cuda::workspace_bytes(ctx, 3 * sh.C * sizeof(float), what));
  batchnorm_backward_apply_coef_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(C, sums, gamma, save_inv_std,
                                                                                   coef);
  CUDA_CHECK_LAUNCH("batchnorm backward (coefficients)");
  const float* y_read = act ? y : nullptr;
  const bool aligned = cuda::aligned16(x) && cuda::aligned16(dy) && cuda::aligned16(dx) &&
                       (!y_read || cuda::aligned16(y_read));
  with_epilogue(act, [&](auto epi) {
    elementwise(sh, aligned, [&](auto total, auto g, auto c, auto vec, unsigned blocks) {
      batchnorm_backward_dx_act_kernel<decltype(g), decltype(vec)::value, decltype(epi)>
          <<<blocks, kThreads, 0, stream>>>(total, C, g, c, epi, x, y_read, save_mean, coef, dy, dx);
    });
  });
  CUDA_CHECK_LAUNCH("batchnorm backward (dx)");
}

}  // namespace cnn
