// Phased batchnorm on the GPU (see batchnorm.h): the same fixed-slice double sums as
// batchnorm_cuda.cu, about a shift every rank shares (running_mean), written as (2C + 1) doubles a
// caller may all-reduce over the ranks; then finalize + one elementwise pass with the activation
// folded into its epilogue (forward) or into its read of dy (backward, from the saved y).
// Trap: N may be 0 (a rank without samples still joins the reductions): kernels then see no values,
// and the sums are zeros with count 0; the elementwise passes are skipped.
#include <algorithm>

#include "core/cuda_check.h"
#include "ops/batchnorm.h"
#include "ops/batchnorm.cuh"
#include "ops/reduce.cuh"

namespace cnn {

// One thread per channel: the slices in slice order into out (2C + 1); thread 0 writes the count.
static __global__ void batchnorm_phase_collect_kernel(int C, int slices, double count,
                                                      const double* __restrict__ partial,  // (C, slices, 2)
                                                      double* __restrict__ out) {          // (2C + 1)
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c == 0) out[2 * C] = count;
  if (c >= C) return;
  double a, b;
  sum_slices(partial, c, slices, a, b);
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

static void check_phase_shape(const char* what, const BatchnormShape& sh) {
  if (sh.N < 0 || sh.C <= 0 || sh.H <= 0 || sh.W <= 0)
    CNN_THROW("{}: sizes must be positive (N may be 0), got N={} C={} H={} W={}", what, sh.N, sh.C, sh.H, sh.W);
  check_cuda_limits(what, sh);
}

void batchnorm_forward_stats_cuda(const ExecContext& ctx, const BatchnormShape& sh,
                                  const float* x,             // (N, C, H, W)
                                  const float* running_mean,  // (C): the shift
                                  double* stats) {            // (2C + 1)
  const char* what = "batchnorm forward statistics";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_phase_shape(what, sh);
  const int slices = slices_for(sh), C = static_cast<int>(sh.C);
  double* partial = scratch(ctx, sh, slices, 0, what).partial;
  batchnorm_forward_stats_kernel<<<dim3(slices, C), kThreads, 0, stream>>>(layout_of(sh), x, running_mean, 1,
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
  with_epilogue(act, [&](auto epi) { launch_normalize(stream, sh, epi, x, save_mean, scale, beta, y); });
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
  batchnorm_infer_prepare_kernel<<<channel_blocks(C), kThreads, 0, stream>>>(C, sh.eps, gamma, running_mean,
                                                                                 running_var, per_channel,
                                                                                 per_channel + C);
  CUDA_CHECK_LAUNCH("batchnorm inference (prepare)");
  if (sh.N == 0) return;
  with_epilogue(act, [&](auto epi) { launch_normalize(stream, sh, epi, x, per_channel, per_channel + C, beta, y); });
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
  double* partial = scratch(ctx, sh, slices, 0, what).partial;
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
  with_epilogue(act, [&](auto epi) { launch_dx(stream, sh, epi, x, y_read, save_mean, coef, dy, dx); });
  CUDA_CHECK_LAUNCH("batchnorm backward (dx)");
}

}  // namespace cnn
