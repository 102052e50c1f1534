// Batch normalisation on the GPU with the CPU fast path's arithmetic: per-channel double partial
// sums over fixed slices (grid slices x C, fixed-order block sums), a per-channel finalize adding
// them in slice order, then one elementwise pass. Slicing depends on the shape only: bitwise repeatable.
// Trap: statistics sum x - x0 (x0 = the channel's first value) as on the CPU, because
// sum(x^2) - sum(x)^2/M in any precision loses the variance of large-mean channels.
#include <algorithm>

#include "core/cuda_check.h"
#include "ops/batchnorm.h"
#include "ops/batchnorm.cuh"
#include "ops/reduce.cuh"

namespace cnn {


// grid (slices, C): partial sums of d = x - x0 and d^2 for each (channel, slice).
static __global__ void batchnorm_forward_stats_kernel(ChannelLayout L,
                                                      const float* __restrict__ x,     // (N, C, H, W)
                                                      double* __restrict__ partial) {  // (C, slices, 2)
  __shared__ double shared[kThreads / cuda::kWarpSize];
  const int c = blockIdx.y;
  int begin, end;
  slice_of(L.M, begin, end);
  const double shift = x[static_cast<int64_t>(c) * L.HW];
  double s = 0.0, ss = 0.0;
  for (int j = begin + static_cast<int>(threadIdx.x); j < end; j += kThreads) {
    const double d = static_cast<double>(x[L.at(c, j)]) - shift;
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

// One thread per channel: mean, variance, running statistics, and the (mean, scale) the
// normalisation pass uses, all as batchnorm_forward_train_cpu computes them.
static __global__ void batchnorm_forward_finalize_kernel(int C, int slices, int M, double eps, double momentum,
                                                         const float* __restrict__ x,  // (N, C, H, W)
                                                         int HW,
                                                         const double* __restrict__ partial,  // (C, slices, 2)
                                                         const float* __restrict__ gamma,     // (C)
                                                         float* __restrict__ running_mean,    // (C)
                                                         float* __restrict__ running_var,     // (C)
                                                         float* __restrict__ save_mean,       // (C)
                                                         float* __restrict__ save_inv_std,    // (C)
                                                         float* __restrict__ norm_mean,       // (C)
                                                         float* __restrict__ norm_scale) {    // (C)
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double s = 0.0, ss = 0.0;
  for (int b = 0; b < slices; ++b) {
    s += partial[(static_cast<int64_t>(c) * slices + b) * 2];
    ss += partial[(static_cast<int64_t>(c) * slices + b) * 2 + 1];
  }
  const double m = static_cast<double>(M);
  const double mean = static_cast<double>(x[static_cast<int64_t>(c) * HW]) + s / m;
  const double var = fmax(0.0, (ss - s * s / m) / m);
  const double inv_std = 1.0 / sqrt(var + eps);
  const float mean_f = static_cast<float>(mean);
  const double unbiased = var * m / (m - 1.0);
  running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
  running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
  save_mean[c] = mean_f;
  save_inv_std[c] = static_cast<float>(inv_std);
  norm_mean[c] = mean_f;
  norm_scale[c] = static_cast<float>(static_cast<double>(gamma[c]) * inv_std);
}

// Inference: (mean, scale) from the running statistics, as batchnorm_forward_infer_cpu.
static __global__ void batchnorm_forward_infer_prepare_kernel(int C, double eps,
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

// y = (x - mean[c]) * scale[c] + beta[c]. kVec: float4 groups, which never straddle channels
// because HW % 4 == 0 there.
template <typename Div, bool kVec>
static __global__ void batchnorm_forward_normalize_kernel(typename Div::Index total, int C, Div by_group, Div by_C,
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
      v.x = (v.x - m) * k + b;
      v.y = (v.y - m) * k + b;
      v.z = (v.z - m) * k + b;
      v.w = (v.w - m) * k + b;
      reinterpret_cast<float4*>(y)[i] = v;
    }
  } else {
    for (I i = first; i < total; i += stride) {
      const int c = channel_of(i, C, by_group, by_C);
      y[i] = (x[i] - mean[c]) * scale[c] + beta[c];
    }
  }
}

// grid (slices, C): partial sums of dy and dy * (x - mean) for each (channel, slice).
static __global__ void batchnorm_backward_sums_kernel(ChannelLayout L,
                                                      const float* __restrict__ x,          // (N, C, H, W)
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
    const double g = dy[a];
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

// One thread per channel: dgamma, dbeta and the coefficients of dx = a (dy - b - (x - mean) k).
static __global__ void batchnorm_backward_finalize_kernel(int C, int slices, int M,
                                                          const double* __restrict__ partial,      // (C, slices, 2)
                                                          const float* __restrict__ gamma,         // (C)
                                                          const float* __restrict__ save_inv_std,  // (C)
                                                          float* __restrict__ dgamma,              // (C) or null
                                                          float* __restrict__ dbeta,               // (C) or null
                                                          float* __restrict__ coef) {              // (3, C): a, b, k
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double sum_dy = 0.0, sum_dy_xc = 0.0;
  for (int b = 0; b < slices; ++b) {
    sum_dy += partial[(static_cast<int64_t>(c) * slices + b) * 2];
    sum_dy_xc += partial[(static_cast<int64_t>(c) * slices + b) * 2 + 1];
  }
  const double inv_std = save_inv_std[c];
  const double sum_dy_xhat = sum_dy_xc * inv_std;
  if (dgamma) dgamma[c] = static_cast<float>(sum_dy_xhat);
  if (dbeta) dbeta[c] = static_cast<float>(sum_dy);
  const double m = static_cast<double>(M);
  coef[c] = static_cast<float>(gamma[c] * inv_std);
  coef[C + c] = static_cast<float>(sum_dy / m);
  coef[2 * C + c] = static_cast<float>(inv_std * sum_dy_xhat / m);
}

template <typename Div, bool kVec>
static __global__ void batchnorm_backward_dx_kernel(typename Div::Index total, int C, Div by_group, Div by_C,
                                                    const float* __restrict__ x,          // (N, C, H, W)
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
      const float4 g = reinterpret_cast<const float4*>(dy)[i];
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
      dx[i] = coef[c] * (dy[i] - coef[C + c] - (x[i] - save_mean[c]) * coef[2 * C + c]);
    }
  }
}

static void check_shape(const char* what, const BatchnormShape& sh) {
  batchnorm_check_shape(what, sh);
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
static Scratch scratch(const ExecContext& ctx, const BatchnormShape& sh, int slices, int64_t floats, const char* what) {
  const size_t partial_bytes = static_cast<size_t>(sh.C) * slices * 2 * sizeof(double);
  char* base = static_cast<char*>(cuda::workspace_bytes(ctx, partial_bytes + floats * sizeof(float), what));
  return Scratch{reinterpret_cast<double*>(base), reinterpret_cast<float*>(base + partial_bytes)};
}

// The elementwise kernels run in int32 with FastDiv32 when every index fits, else in int64.
static void launch_normalize(cudaStream_t stream, const BatchnormShape& sh, const float* x, const float* mean,
                             const float* scale, const float* beta, float* y) {
  const int64_t total = sh.N * sh.C * sh.H * sh.W, HW = sh.H * sh.W;
  const int C = static_cast<int>(sh.C);
  const bool vec = HW % 4 == 0 && cuda::aligned16(x) && cuda::aligned16(y);
  const int64_t group = vec ? HW / 4 : HW;
  const unsigned blocks = cuda::grid_blocks(vec ? total / 4 : total, kThreads);
  if (cuda::fits_int32(total + int64_t{blocks} * kThreads)) {
    const cuda::FastDiv32 g(group), c(C);
    const auto n = static_cast<int32_t>(total);
    if (vec)
      batchnorm_forward_normalize_kernel<cuda::FastDiv32, true>
          <<<blocks, kThreads, 0, stream>>>(n, C, g, c, x, mean, scale, beta, y);
    else
      batchnorm_forward_normalize_kernel<cuda::FastDiv32, false>
          <<<blocks, kThreads, 0, stream>>>(n, C, g, c, x, mean, scale, beta, y);
  } else {
    const cuda::PlainDiv64 g(group), c(C);
    if (vec)
      batchnorm_forward_normalize_kernel<cuda::PlainDiv64, true>
          <<<blocks, kThreads, 0, stream>>>(total, C, g, c, x, mean, scale, beta, y);
    else
      batchnorm_forward_normalize_kernel<cuda::PlainDiv64, false>
          <<<blocks, kThreads, 0, stream>>>(total, C, g, c, x, mean, scale, beta, y);
  }
}

static void launch_dx(cudaStream_t stream, const BatchnormShape& sh, const float* x, const float* save_mean,
                      const float* coef, const float* dy, float* dx) {
  const int64_t total = sh.N * sh.C * sh.H * sh.W, HW = sh.H * sh.W;
  const int C = static_cast<int>(sh.C);
  const bool vec = HW % 4 == 0 && cuda::aligned16(x) && cuda::aligned16(dy) && cuda::aligned16(dx);
  const int64_t group = vec ? HW / 4 : HW;
  const unsigned blocks = cuda::grid_blocks(vec ? total / 4 : total, kThreads);
  if (cuda::fits_int32(total + int64_t{blocks} * kThreads)) {
    const cuda::FastDiv32 g(group), c(C);
    const auto n = static_cast<int32_t>(total);
    if (vec)
      batchnorm_backward_dx_kernel<cuda::FastDiv32, true>
          <<<blocks, kThreads, 0, stream>>>(n, C, g, c, x, save_mean, coef, dy, dx);
    else
      batchnorm_backward_dx_kernel<cuda::FastDiv32, false>
          <<<blocks, kThreads, 0, stream>>>(n, C, g, c, x, save_mean, coef, dy, dx);
  } else {
    const cuda::PlainDiv64 g(group), c(C);
    if (vec)
      batchnorm_backward_dx_kernel<cuda::PlainDiv64, true>
          <<<blocks, kThreads, 0, stream>>>(total, C, g, c, x, save_mean, coef, dy, dx);
    else
      batchnorm_backward_dx_kernel<cuda::PlainDiv64, false>
          <<<blocks, kThreads, 0, stream>>>(total, C, g, c, x, save_mean, coef, dy, dx);
  }
}

static unsigned channel_blocks(int64_t C) { return static_cast<unsigned>((C + kThreads - 1) / kThreads); }

void batchnorm_forward_train_cuda(const ExecContext& ctx, const BatchnormShape& sh,
                                  const float* x,         // (N, C, H, W)
                                  const float* gamma,     // (C)
                                  const float* beta,      // (C)
                                  float* y,               // (N, C, H, W)
                                  float* running_mean,    // (C)
                                  float* running_var,     // (C)
                                  float* save_mean,       // (C)
                                  float* save_inv_std) {  // (C)
  const char* what = "batchnorm forward";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_shape(what, sh);
  batchnorm_check_training_count(what, sh);
  const int slices = slices_for(sh), C = static_cast<int>(sh.C);
  const ChannelLayout L = layout_of(sh);
  const Scratch s = scratch(ctx, sh, slices, 2 * sh.C, what);
  float* norm_mean = s.per_channel;
  float* norm_scale = s.per_channel + C;
  batchnorm_forward_stats_kernel<<<dim3(slices, C), kThreads, 0, stream>>>(L, x, s.partial);
  CUDA_CHECK_LAUNCH("batchnorm forward (statistics)");
  batchnorm_forward_finalize_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(
      C, slices, L.M, sh.eps, sh.momentum, x, L.HW, s.partial, gamma, running_mean, running_var, save_mean,
      save_inv_std, norm_mean, norm_scale);
  CUDA_CHECK_LAUNCH("batchnorm forward (finalize)");
  launch_normalize(stream, sh, x, norm_mean, norm_scale, beta, y);
  CUDA_CHECK_LAUNCH("batchnorm forward (normalize)");
}

void batchnorm_forward_infer_cuda(const ExecContext& ctx, const BatchnormShape& sh,
                                  const float* x,             // (N, C, H, W)
                                  const float* gamma,         // (C)
                                  const float* beta,          // (C)
                                  const float* running_mean,  // (C)
                                  const float* running_var,   // (C)
                                  float* y) {                 // (N, C, H, W)
  const char* what = "batchnorm inference";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_shape(what, sh);
  const int C = static_cast<int>(sh.C);
  float* per_channel = static_cast<float*>(cuda::workspace_bytes(ctx, 2 * sh.C * sizeof(float), what));
  batchnorm_forward_infer_prepare_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(
      C, sh.eps, gamma, running_mean, running_var, per_channel, per_channel + C);
  CUDA_CHECK_LAUNCH("batchnorm inference (prepare)");
  launch_normalize(stream, sh, x, per_channel, per_channel + C, beta, y);
  CUDA_CHECK_LAUNCH("batchnorm inference (normalize)");
}

void batchnorm_backward_cuda(const ExecContext& ctx, const BatchnormShape& sh,
                             const float* x,             // (N, C, H, W)
                             const float* gamma,         // (C)
                             const float* save_mean,     // (C)
                             const float* save_inv_std,  // (C)
                             const float* dy,            // (N, C, H, W)
                             float* dx,                  // (N, C, H, W) or null
                             float* dgamma,              // (C) or null
                             float* dbeta) {             // (C) or null
  const char* what = "batchnorm backward";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_shape(what, sh);
  const int slices = slices_for(sh), C = static_cast<int>(sh.C);
  const ChannelLayout L = layout_of(sh);
  const Scratch s = scratch(ctx, sh, slices, 3 * sh.C, what);
  batchnorm_backward_sums_kernel<<<dim3(slices, C), kThreads, 0, stream>>>(L, x, save_mean, dy, s.partial);
  CUDA_CHECK_LAUNCH("batchnorm backward (sums)");
  batchnorm_backward_finalize_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(
      C, slices, L.M, s.partial, gamma, save_inv_std, dgamma, dbeta, s.per_channel);
  CUDA_CHECK_LAUNCH("batchnorm backward (finalize)");
  if (!dx) return;
  launch_dx(stream, sh, x, save_mean, s.per_channel, dy, dx);
  CUDA_CHECK_LAUNCH("batchnorm backward (dx)");
}

}  // namespace cnn
