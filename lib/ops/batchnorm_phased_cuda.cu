// Phased batchnorm on the GPU (see batchnorm.h): the same fixed-slice double sums as
// batchnorm_cuda.cu, about a shift every rank shares (running_mean), written as (2C + 1) doubles a
// caller may all-reduce over the ranks; then one per-channel pass (grid slices x C) whose blocks
// derive their channel's coefficients from those sums, with the activation folded into its
// epilogue (forward) or into its read of dy (backward, from the saved y). One kernel per phase.
// The bf16 and f16 rows run the channels-last kernels of batchnorm_nhwc_bf16.cuh with the same prologues.
// Trap: N may be 0 (a rank without samples still joins the reductions): kernels then see no values,
// and the sums are zeros with count 0; the elementwise passes are skipped.
#include <algorithm>

#include "core/cuda_check.h"
#include "ops/batchnorm.h"
#include "ops/batchnorm.cuh"
#include "ops/batchnorm_nhwc_bf16.cuh"
#include "ops/reduce.cuh"

namespace cnn {

// Normalize prologue of training, from the summed stats as batchnorm_forward_apply_cpu; finish (in
// the channel's last block, after every block read the shift running_mean[c]) updates the running
// statistics and writes save_mean, save_inv_std. A count below 2 gives inf or NaN in the running
// variance, which the trainer's non-finite check reports.
struct NormFromSums {
  int C;
  double eps, momentum;
  const double* __restrict__ stats;    // (2C + 1)
  const float* __restrict__ gamma;     // (C)
  float* __restrict__ running_mean;    // (C)
  float* __restrict__ running_var;     // (C)
  float* __restrict__ save_mean;       // (C)
  float* __restrict__ save_inv_std;    // (C)
  double m = 0.0, mean = 0.0, var = 0.0, inv_std = 0.0;  // begin -> finish, in thread 0
  __device__ void begin(int c, float& norm_mean, float& norm_scale) {
    m = stats[2 * C];
    const double d_mean = stats[c] / m;
    mean = static_cast<double>(running_mean[c]) + d_mean;
    var = fmax(0.0, stats[C + c] / m - d_mean * d_mean);
    inv_std = 1.0 / sqrt(var + eps);
    norm_mean = static_cast<float>(mean);
    norm_scale = static_cast<float>(static_cast<double>(gamma[c]) * inv_std);
  }
  __device__ void finish(int c) const {
    const double unbiased = var * m / (m - 1.0);
    running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
    save_mean[c] = static_cast<float>(mean);
    save_inv_std[c] = static_cast<float>(inv_std);
  }
};

// Normalize prologue of inference, from the running statistics as batchnorm_forward_infer_cpu.
struct NormFromRunning {
  double eps;
  const float* __restrict__ gamma;         // (C)
  const float* __restrict__ running_mean;  // (C)
  const float* __restrict__ running_var;   // (C)
  __device__ void begin(int c, float& norm_mean, float& norm_scale) const {
    norm_mean = running_mean[c];
    norm_scale = static_cast<float>(gamma[c] / sqrt(static_cast<double>(running_var[c]) + eps));
  }
  __device__ void finish(int) const {}
};

// (a, b, k) of dx from the summed sums, as batchnorm_backward_apply_cpu.
struct CoefFromSums {
  int C;
  const double* __restrict__ sums;         // (2C + 1)
  const float* __restrict__ gamma;         // (C)
  const float* __restrict__ save_inv_std;  // (C)
  __device__ void operator()(int c, float* abk) const {
    const double m = sums[2 * C];
    const double inv_std = save_inv_std[c];
    const double sum_g_xhat = sums[C + c] * inv_std;
    abk[0] = static_cast<float>(gamma[c] * inv_std);
    abk[1] = static_cast<float>(sums[c] / m);
    abk[2] = static_cast<float>(inv_std * sum_g_xhat / m);
  }
};

// The stream of a phase's call, once its shape is checked.
static cudaStream_t phase_stream(const ExecContext& ctx, const BatchnormShape& sh, const char* what) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  if (sh.N < 0 || sh.C <= 0 || sh.H <= 0 || sh.W <= 0)
    CNN_THROW("{}: sizes must be positive (N may be 0), got N={} C={} H={} W={}", what, sh.N, sh.C, sh.H, sh.W);
  check_cuda_limits(what, sh);
  return stream;
}

void batchnorm_forward_stats_cuda(const BatchnormForwardStats& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const char* what = "batchnorm forward statistics";
  cudaStream_t stream = phase_stream(ctx, sh, what);
  const int slices = slices_for(sh), C = static_cast<int>(sh.C);
  double* partial = scratch(ctx, sh, slices, 0, what).partial;
  const CollectTail tail{C, static_cast<double>(sh.N * sh.H * sh.W), a.stats, nullptr, nullptr, nullptr};
  batchnorm_forward_stats_kernel<<<dim3(slices, C), kThreads, 0, stream>>>(
      layout_of(sh), a.x.f32(), ChannelShift<float>{a.running_mean, 1}, partial, channel_counters(ctx, sh, what),
      tail);
  CUDA_CHECK_LAUNCH("batchnorm forward statistics (sums)");
}

void batchnorm_forward_apply_cuda(const BatchnormForwardApply& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const char* what = "batchnorm forward";
  cudaStream_t stream = phase_stream(ctx, sh, what);
  const NormFromSums pro{static_cast<int>(sh.C), sh.eps,        sh.momentum, a.stats,       a.gamma,
                         a.running_mean,         a.running_var, a.save_mean, a.save_inv_std};
  unsigned* counters = channel_counters(ctx, sh, what);
  // With N = 0 (a rank without samples) the kernel still runs: its one block per channel updates
  // the running statistics from the global sums and touches no x or y.
  with_epilogue(a.act,
                [&](auto epi) { launch_normalize(stream, sh, epi, pro, a.x.f32(), a.beta, a.y.f32(), counters); });
  CUDA_CHECK_LAUNCH("batchnorm forward (apply)");
}

void batchnorm_forward_infer_act_cuda(const BatchnormForwardInferAct& a) {
  const BatchnormShape& sh = a.sh;
  cudaStream_t stream = phase_stream(*a.ctx, sh, "batchnorm inference");
  if (sh.N == 0) return;
  const NormFromRunning pro{sh.eps, a.gamma, a.running_mean, a.running_var};
  with_epilogue(a.act,
                [&](auto epi) { launch_normalize(stream, sh, epi, pro, a.x.f32(), a.beta, a.y.f32(), nullptr); });
  CUDA_CHECK_LAUNCH("batchnorm inference (normalize)");
}

void batchnorm_backward_stats_cuda(const BatchnormBackwardStats& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const float *x = a.x.f32(), *dy = a.dy.f32();
  const float* y_read = a.act ? a.y.f32() : nullptr;
  const char* what = "batchnorm backward statistics";
  cudaStream_t stream = phase_stream(ctx, sh, what);
  const int slices = slices_for(sh), C = static_cast<int>(sh.C);
  double* partial = scratch(ctx, sh, slices, 0, what).partial;
  unsigned* counters = channel_counters(ctx, sh, what);
  const CollectTail tail{C, static_cast<double>(sh.N * sh.H * sh.W), a.sums, a.save_inv_std, a.dgamma, a.dbeta};
  with_epilogue(a.act, [&](auto epi) {
    batchnorm_backward_stats_act_kernel<<<dim3(slices, C), kThreads, 0, stream>>>(
        layout_of(sh), epi, x, y_read, a.save_mean, dy, partial, counters, tail);
  });
  CUDA_CHECK_LAUNCH("batchnorm backward statistics (sums)");
}

void batchnorm_backward_apply_cuda(const BatchnormBackwardApply& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const float *x = a.x.f32(), *dy = a.dy.f32();
  const float* y_read = a.act ? a.y.f32() : nullptr;
  float* dx = a.dx.f32();
  const char* what = "batchnorm backward";
  cudaStream_t stream = phase_stream(ctx, sh, what);
  if (sh.N == 0 || !dx) return;
  const CoefFromSums coef{static_cast<int>(sh.C), a.sums, a.gamma, a.save_inv_std};
  with_epilogue(a.act, [&](auto epi) { launch_dx(stream, sh, epi, coef, a.save_mean, x, y_read, dy, dx); });
  CUDA_CHECK_LAUNCH("batchnorm backward (dx)");
}

// BF16 and F16 (T) channels-last (batchnorm_nhwc_bf16.cuh): the same phases, sums and coefficients.
template <typename T>
static void forward_stats_nhwc(const BatchnormForwardStats& a) {
  const char* what = "batchnorm forward statistics";
  cudaStream_t stream = phase_stream(*a.ctx, a.sh, what);
  const T* x = half16_data<T>(a.x);
  const ChannelShift<float> shift{a.running_mean, 1};
  const CollectTail tail{static_cast<int>(a.sh.C), static_cast<double>(a.sh.N * a.sh.H * a.sh.W), a.stats, nullptr,
                         nullptr, nullptr};
  launch_sums_nhwc(
      *a.ctx, stream, a.sh, nhwc_vectorized(a.sh, {x}), 0, what,
      [&](auto width) { return ShiftedTerms<decltype(width)::value, ChannelShift<float>, T>{x, shift}; },
      [&](const Scratch&) { return tail; });
  CUDA_CHECK_LAUNCH("batchnorm forward statistics nhwc (sums)");
}

template <typename T>
static void forward_apply_nhwc(const BatchnormForwardApply& a) {
  const char* what = "batchnorm forward";
  cudaStream_t stream = phase_stream(*a.ctx, a.sh, what);
  const NormFromSums pro{static_cast<int>(a.sh.C), a.sh.eps,      a.sh.momentum, a.stats,       a.gamma,
                         a.running_mean,           a.running_var, a.save_mean,   a.save_inv_std};
  // With N = 0 the kernel still runs (one slice a tile) to update the running statistics.
  launch_normalize_nhwc(stream, a.sh, a.act, pro, half16_data<T>(a.x), a.beta, half16_data<T>(a.y),
                        channel_counters(*a.ctx, a.sh, what));
  CUDA_CHECK_LAUNCH("batchnorm forward nhwc (apply)");
}

template <typename T>
static void forward_infer_act_nhwc(const BatchnormForwardInferAct& a) {
  cudaStream_t stream = phase_stream(*a.ctx, a.sh, "batchnorm inference");
  if (a.sh.N == 0) return;
  const NormFromRunning pro{a.sh.eps, a.gamma, a.running_mean, a.running_var};
  launch_normalize_nhwc(stream, a.sh, a.act, pro, half16_data<T>(a.x), a.beta, half16_data<T>(a.y), nullptr);
  CUDA_CHECK_LAUNCH("batchnorm inference nhwc (normalize)");
}

template <typename T>
static void backward_stats_nhwc(const BatchnormBackwardStats& a) {
  const char* what = "batchnorm backward statistics";
  cudaStream_t stream = phase_stream(*a.ctx, a.sh, what);
  const T *x = half16_data<T>(a.x), *dy = half16_data<T>(a.dy);
  const T* y_read = a.act ? half16_data<T>(a.y) : nullptr;
  const CollectTail tail{static_cast<int>(a.sh.C), static_cast<double>(a.sh.N * a.sh.H * a.sh.W), a.sums,
                         a.save_inv_std,           a.dgamma,                                     a.dbeta};
  with_epilogue(a.act, [&](auto epi) {
    launch_sums_nhwc(
        *a.ctx, stream, a.sh, nhwc_vectorized(a.sh, {x, y_read, dy}), 0, what,
        [&](auto width) {
          return GradTerms<decltype(width)::value, decltype(epi), T>{epi, x, y_read, dy, a.save_mean};
        },
        [&](const Scratch&) { return tail; });
  });
  CUDA_CHECK_LAUNCH("batchnorm backward statistics nhwc (sums)");
}

template <typename T>
static void backward_apply_nhwc(const BatchnormBackwardApply& a) {
  cudaStream_t stream = phase_stream(*a.ctx, a.sh, "batchnorm backward");
  T* dx = half16_data<T>(a.dx);
  if (a.sh.N == 0 || !dx) return;
  const CoefFromSums coef{static_cast<int>(a.sh.C), a.sums, a.gamma, a.save_inv_std};
  launch_dx_nhwc(stream, a.sh, a.act, coef, a.save_mean, half16_data<T>(a.x),
                 a.act ? half16_data<T>(a.y) : static_cast<const T*>(nullptr), half16_data<T>(a.dy), dx);
  CUDA_CHECK_LAUNCH("batchnorm backward nhwc (dx)");
}

void batchnorm_forward_stats_cuda_bf16(const BatchnormForwardStats& a) { forward_stats_nhwc<bf16>(a); }
void batchnorm_forward_stats_cuda_f16(const BatchnormForwardStats& a) { forward_stats_nhwc<f16>(a); }
void batchnorm_forward_apply_cuda_bf16(const BatchnormForwardApply& a) { forward_apply_nhwc<bf16>(a); }
void batchnorm_forward_apply_cuda_f16(const BatchnormForwardApply& a) { forward_apply_nhwc<f16>(a); }
void batchnorm_forward_infer_act_cuda_bf16(const BatchnormForwardInferAct& a) { forward_infer_act_nhwc<bf16>(a); }
void batchnorm_forward_infer_act_cuda_f16(const BatchnormForwardInferAct& a) { forward_infer_act_nhwc<f16>(a); }
void batchnorm_backward_stats_cuda_bf16(const BatchnormBackwardStats& a) { backward_stats_nhwc<bf16>(a); }
void batchnorm_backward_stats_cuda_f16(const BatchnormBackwardStats& a) { backward_stats_nhwc<f16>(a); }
void batchnorm_backward_apply_cuda_bf16(const BatchnormBackwardApply& a) { backward_apply_nhwc<bf16>(a); }
void batchnorm_backward_apply_cuda_f16(const BatchnormBackwardApply& a) { backward_apply_nhwc<f16>(a); }

}  // namespace cnn
