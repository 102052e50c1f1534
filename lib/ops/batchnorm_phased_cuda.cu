// Phased batchnorm on the GPU (see batchnorm.h): the same fixed-slice double sums as
// batchnorm_cuda.cu, about a shift every rank shares (running_mean), written as (2C + 1) doubles a
// caller may all-reduce over the ranks; then one per-channel pass (grid slices x C) whose blocks
// derive their channel's coefficients from those sums, with the activation folded into its
// epilogue (forward) or into its read of dy (backward, from the saved y). One kernel per phase.
// The bf16, f16 and f32cl rows run the channels-last kernels of batchnorm_nhwc_bf16.cuh (T = bf16, f16,
// float) with the same prologues.
// Trap: N may be 0 (a rank without samples still joins the reductions): kernels then see no values,
// and the sums are zeros with count 0; the elementwise passes are skipped.
#include <algorithm>

#include "core/cuda_check.h"
#include "ops/batchnorm.h"
#include "ops/batchnorm.cuh"
#include "ops/batchnorm_nchw_one.cuh"
#include "ops/batchnorm_nhwc_bf16.cuh"
#include "ops/reduce.cuh"

namespace cnn {

// A channel's statistics from its stats (sum d, sum d^2 about `shift`, count m), as
// batchnorm_forward_apply_cpu forms them, and the running and saved statistics they update.
struct PhasedMoments {
  double m = 0.0, mean = 0.0, var = 0.0, inv_std = 0.0;
  __device__ void set(double count, double s, double ss, double shift, double eps) {
    m = count;
    const double d_mean = s / m;
    mean = shift + d_mean;
    var = fmax(0.0, ss / m - d_mean * d_mean);
    inv_std = 1.0 / sqrt(var + eps);
  }
  __device__ void update(int c, double momentum, float* running_mean, float* running_var, float* save_mean,
                         float* save_inv_std, const float* mean_offset) const {
    const double unbiased = var * m / (m - 1.0);
    running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] +
                                         momentum * batchnorm_running_input(mean, mean_offset, c));
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
    save_mean[c] = static_cast<float>(mean);
    save_inv_std[c] = static_cast<float>(inv_std);
  }
};

// Normalize prologue of training, from the summed stats as batchnorm_forward_apply_cpu; finish (in
// the channel's last block, after every block read the shift running_mean[c] - offset) updates the running
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
  const float* __restrict__ mean_offset;  // (C) or null (batchnorm.h)
  // The channels-last rows' scale, batchnorm_saved_scale of the saved FP32 inverse standard deviation,
  // which a backward forms again (batchnorm.h: "A sign-only activation's derivative"); else (the f32
  // NCHW rows, bit for bit as before) from the double one.
  bool saved_scale = false;
  PhasedMoments mo;                    // begin -> finish, in one thread
  __device__ void begin(int c, float& norm_mean, float& norm_scale) {
    mo.set(stats[2 * C], stats[c], stats[C + c], static_cast<double>(batchnorm_shift_of(running_mean, mean_offset, c)),
           eps);
    norm_mean = static_cast<float>(mo.mean);
    norm_scale = saved_scale ? batchnorm_saved_scale(gamma[c], static_cast<float>(mo.inv_std))
                             : static_cast<float>(static_cast<double>(gamma[c]) * mo.inv_std);
  }
  __device__ void finish(int c) const {
    mo.update(c, momentum, running_mean, running_var, save_mean, save_inv_std, mean_offset);
  }
};

// Normalize prologue of inference, from the running statistics as batchnorm_forward_infer_cpu.
struct NormFromRunning {
  double eps;
  const float* __restrict__ gamma;         // (C)
  const float* __restrict__ running_mean;  // (C)
  const float* __restrict__ running_var;   // (C)
  const float* __restrict__ mean_offset;   // (C) or null (batchnorm.h)
  __device__ void begin(int c, float& norm_mean, float& norm_scale) const {
    norm_mean = batchnorm_shift_of(running_mean, mean_offset, c);
    norm_scale = static_cast<float>(gamma[c] / sqrt(static_cast<double>(running_var[c]) + eps));
  }
  __device__ void finish(int) const {}
};

// (a, b, k) of dx from channel c's sums (sum g, sum g (x - mean), count m), as
// batchnorm_backward_apply_cpu.
__device__ __forceinline__ void coef_from_sums(double m, double s, double sx, float gamma, double inv_std,
                                               float* abk) {
  const double sum_g_xhat = sx * inv_std;
  abk[0] = static_cast<float>(gamma * inv_std);
  abk[1] = static_cast<float>(s / m);
  abk[2] = static_cast<float>(inv_std * sum_g_xhat / m);
}

// (a, b, k) of dx from the summed sums.
struct CoefFromSums {
  int C;
  const double* __restrict__ sums;         // (2C + 1)
  const float* __restrict__ gamma;         // (C)
  const float* __restrict__ save_inv_std;  // (C)
  __device__ void operator()(int c, float* abk) const {
    coef_from_sums(sums[2 * C], sums[c], sums[C + c], gamma[c], save_inv_std[c], abk);
  }
};

// The one-kernel paths' per-channel steps of the one-rank pairs (the stat of
// batchnorm_one_kernel_nhwc_kernel and of batchnorm_nchw_one.cuh's kernels): NormFromSums's and
// CoefFromSums's arithmetic on this rank's sums, which the owner also writes (CollectTail) as the
// stats phases do. Forward: the shift running_mean[c] is read before the barrier (the owner block
// updates it after), cf = (mean, scale, beta, 0), the scale as NormFromSums forms it with
// saved_scale = kSavedScale (the channels-last rows; the f32 NCHW rows from the double inverse
// standard deviation); backward: cf = (a, b, k, save_mean, z's scale, beta), the last two for
// GradFromZ only (pre.beta set).
template <bool kSavedScale>
struct NormFromOwnSumsOf {
  double count, eps, momentum;
  const float* __restrict__ gamma;     // (C)
  const float* __restrict__ beta;      // (C)
  float* __restrict__ running_mean;    // (C)
  float* __restrict__ running_var;     // (C)
  float* __restrict__ save_mean;       // (C)
  float* __restrict__ save_inv_std;    // (C)
  CollectTail collect;                 // the stats
  const float* __restrict__ mean_offset;  // (C) or null (batchnorm.h)
  static constexpr int kCoefs = 4;
  __device__ float before(int c) const { return batchnorm_shift_of(running_mean, mean_offset, c); }
  __device__ void operator()(int c, double s, double ss, float shift, bool owner, float (&cf)[4]) const {
    PhasedMoments mo;
    mo.set(count, s, ss, static_cast<double>(shift), eps);
    cf[0] = static_cast<float>(mo.mean);
    cf[1] = kSavedScale ? batchnorm_saved_scale(gamma[c], static_cast<float>(mo.inv_std))
                        : static_cast<float>(static_cast<double>(gamma[c]) * mo.inv_std);
    cf[2] = beta[c];
    cf[3] = 0.0f;
    if (!owner) return;
    mo.update(c, momentum, running_mean, running_var, save_mean, save_inv_std, mean_offset);
    collect(c, s, ss);
  }
};
using NormFromOwnSums = NormFromOwnSumsOf<true>;
using NchwNormFromOwnSums = NormFromOwnSumsOf<false>;
struct CoefFromOwnSums {
  double count;
  const float* __restrict__ gamma;         // (C)
  const float* __restrict__ save_mean;     // (C)
  const float* __restrict__ save_inv_std;  // (C)
  CollectTail collect;                     // the sums, dgamma, dbeta
  PreActivation pre{};                     // GradFromZ only (beta set)
  static constexpr int kCoefs = 6;
  __device__ float before(int) const { return 0.0f; }
  __device__ void operator()(int c, double s, double sx, float, bool owner, float (&cf)[6]) const {
    coef_from_sums(count, s, sx, gamma[c], save_inv_std[c], cf);
    cf[3] = save_mean[c];
    cf[4] = cf[5] = 0.0f;
    if (pre.beta) pre.at(c, cf[4], cf[5]);
    if (owner) collect(c, s, sx);
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
      layout_of(sh), a.x.f32(), ChannelShift<float>{a.running_mean, 1, a.mean_offset}, partial,
      channel_counters(ctx, sh, what),
      tail);
  CUDA_CHECK_LAUNCH("batchnorm forward statistics (sums)");
}

void batchnorm_forward_apply_cuda(const BatchnormForwardApply& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const char* what = "batchnorm forward";
  cudaStream_t stream = phase_stream(ctx, sh, what);
  const NormFromSums pro{static_cast<int>(sh.C), sh.eps,        sh.momentum, a.stats,       a.gamma,
                         a.running_mean,         a.running_var, a.save_mean, a.save_inv_std, a.mean_offset};
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
  const NormFromRunning pro{sh.eps, a.gamma, a.running_mean, a.running_var, a.mean_offset};
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

// BF16, F16 and F32CL (T = float) channels-last (batchnorm_nhwc_bf16.cuh): the same phases, sums and
// coefficients.
template <typename T>
static void forward_stats_nhwc(const BatchnormForwardStats& a) {
  const char* what = "batchnorm forward statistics";
  cudaStream_t stream = phase_stream(*a.ctx, a.sh, what);
  const T* x = half16_data<T>(a.x);
  const ChannelShift<float> shift{a.running_mean, 1, a.mean_offset};
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
                         a.running_mean,           a.running_var, a.save_mean,   a.save_inv_std, a.mean_offset,
                         /*saved_scale=*/true};
  // With N = 0 the kernel still runs (one slice a tile) to update the running statistics.
  launch_normalize_nhwc(stream, a.sh, a.act, pro, half16_data<T>(a.x), a.beta, half16_data<T>(a.y),
                        channel_counters(*a.ctx, a.sh, what));
  CUDA_CHECK_LAUNCH("batchnorm forward nhwc (apply)");
}

template <typename T>
static void forward_infer_act_nhwc(const BatchnormForwardInferAct& a) {
  cudaStream_t stream = phase_stream(*a.ctx, a.sh, "batchnorm inference");
  if (a.sh.N == 0) return;
  const NormFromRunning pro{a.sh.eps, a.gamma, a.running_mean, a.running_var, a.mean_offset};
  launch_normalize_nhwc(stream, a.sh, a.act, pro, half16_data<T>(a.x), a.beta, half16_data<T>(a.y), nullptr);
  CUDA_CHECK_LAUNCH("batchnorm inference nhwc (normalize)");
}

template <typename T>
static void backward_stats_nhwc(const BatchnormBackwardStats& a) {
  const char* what = "batchnorm backward statistics";
  cudaStream_t stream = phase_stream(*a.ctx, a.sh, what);
  const T *x = half16_data<T>(a.x), *dy = half16_data<T>(a.dy);
  const bool from_z = batchnorm_grad_from_z(a.act, a.gamma, a.beta);
  const T* y_read = a.act && !from_z ? half16_data<T>(a.y) : nullptr;
  const PreActivation pre{a.gamma, a.save_inv_std, a.beta};
  const CollectTail tail{static_cast<int>(a.sh.C), static_cast<double>(a.sh.N * a.sh.H * a.sh.W), a.sums,
                         a.save_inv_std,           a.dgamma,                                     a.dbeta};
  with_grad_epilogue(a.act, from_z, [&](auto epi) {
    launch_sums_nhwc(
        *a.ctx, stream, a.sh, nhwc_vectorized(a.sh, {x, y_read, dy}), 0, what,
        [&](auto width) {
          return GradTerms<decltype(width)::value, decltype(epi), T>{epi, x, y_read, dy, a.save_mean, pre};
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
                 a.act ? half16_data<T>(a.y) : static_cast<const T*>(nullptr), half16_data<T>(a.dy), dx,
                 PreActivation{a.gamma, a.save_inv_std, a.beta});
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
void batchnorm_forward_stats_cuda_f32cl(const BatchnormForwardStats& a) { forward_stats_nhwc<float>(a); }
void batchnorm_forward_apply_cuda_f32cl(const BatchnormForwardApply& a) { forward_apply_nhwc<float>(a); }
void batchnorm_forward_infer_act_cuda_f32cl(const BatchnormForwardInferAct& a) { forward_infer_act_nhwc<float>(a); }
void batchnorm_backward_stats_cuda_f32cl(const BatchnormBackwardStats& a) { backward_stats_nhwc<float>(a); }
void batchnorm_backward_apply_cuda_f32cl(const BatchnormBackwardApply& a) { backward_apply_nhwc<float>(a); }

// The one-rank pairs as the two phases' rows (of the operands' dtype): the two-kernel path.
static void forward_train_act_phases(const BatchnormForwardTrainAct& a) {
  run_op(Backend::cuda, BatchnormForwardStats{a.ctx, a.sh, a.x, a.running_mean, a.stats, a.mean_offset});
  run_op(Backend::cuda, BatchnormForwardApply{a.ctx, a.sh, a.stats, a.x, a.gamma, a.beta, a.act, a.y, a.running_mean,
                                              a.running_var, a.save_mean, a.save_inv_std, a.mean_offset});
}

static void backward_act_phases(const BatchnormBackwardAct& a) {
  run_op(Backend::cuda, BatchnormBackwardStats{a.ctx, a.sh, a.x, a.y, a.act, a.save_mean, a.save_inv_std, a.dy,
                                               a.sums, a.dgamma, a.dbeta, a.gamma, a.beta});
  run_op(Backend::cuda, BatchnormBackwardApply{a.ctx, a.sh, a.sums, a.x, a.y, a.act, a.gamma, a.save_mean,
                                               a.save_inv_std, a.dy, a.dx, a.beta});
}

// F32 NCHW: one kernel a direction where `path` and the shape allow (batchnorm_nchw_one.cuh), with the
// phases' arithmetic bit for bit; else the two phases.
static void forward_train_act_f32(const BatchnormForwardTrainAct& a, NhwcPath path) {
  const char* what = "batchnorm forward";
  const BatchnormShape& sh = a.sh;
  cudaStream_t stream = phase_stream(*a.ctx, sh, what);
  const double count = static_cast<double>(sh.N * sh.H * sh.W);
  const NchwNormFromOwnSums stat{count,          sh.eps,         sh.momentum,   a.gamma,
                                 a.beta,         a.running_mean, a.running_var, a.save_mean,
                                 a.save_inv_std, CollectTail{static_cast<int>(sh.C), count, a.stats, nullptr, nullptr, nullptr},
                                 a.mean_offset};
  bool ran = false;
  with_epilogue(a.act, [&](auto epi) {
    ran = forward_one_kernel_nchw(*a.ctx, stream, sh, path, what, epi,
                                  ChannelShift<float>{a.running_mean, 1, a.mean_offset}, stat, a.x.f32(), a.y.f32());
  });
  if (ran) {
    CUDA_CHECK_LAUNCH("batchnorm forward (one kernel)");
    return;
  }
  forward_train_act_phases(a);
}

// The f32 backward reads y for act' (the layer gives no beta in fp32: its forward forms z its own way).
static void backward_act_f32(const BatchnormBackwardAct& a, NhwcPath path) {
  const char* what = "batchnorm backward";
  const BatchnormShape& sh = a.sh;
  cudaStream_t stream = phase_stream(*a.ctx, sh, what);
  const double count = static_cast<double>(sh.N * sh.H * sh.W);
  const CoefFromOwnSums stat{count, a.gamma, a.save_mean, a.save_inv_std,
                             CollectTail{static_cast<int>(sh.C), count, a.sums, a.save_inv_std, a.dgamma, a.dbeta}};
  bool ran = false;
  with_epilogue(a.act, [&](auto epi) {
    ran = backward_one_kernel_nchw(*a.ctx, stream, sh, path, what, epi, stat, a.x.f32(),
                                   a.act ? a.y.f32() : nullptr, a.save_mean, a.dy.f32(), a.dx.f32());
  });
  if (ran) {
    CUDA_CHECK_LAUNCH("batchnorm backward (one kernel)");
    return;
  }
  backward_act_phases(a);
}

void batchnorm_forward_train_act_cuda(const BatchnormForwardTrainAct& a) {
  forward_train_act_f32(a, default_nhwc_path());
}
void batchnorm_forward_train_act_cuda_f32_one(const BatchnormForwardTrainAct& a) {
  forward_train_act_f32(a, NhwcPath::one);
}
void batchnorm_forward_train_act_cuda_f32_two(const BatchnormForwardTrainAct& a) {
  forward_train_act_f32(a, NhwcPath::two);
}
void batchnorm_backward_act_cuda(const BatchnormBackwardAct& a) { backward_act_f32(a, default_nhwc_path()); }
void batchnorm_backward_act_cuda_f32_one(const BatchnormBackwardAct& a) { backward_act_f32(a, NhwcPath::one); }
void batchnorm_backward_act_cuda_f32_two(const BatchnormBackwardAct& a) { backward_act_f32(a, NhwcPath::two); }

// BF16, F16 and F32CL: one kernel a direction where `path` and the shape allow, else the two phases.
template <typename T>
static void forward_train_act_nhwc(const BatchnormForwardTrainAct& a, NhwcPath path) {
  const char* what = "batchnorm forward";
  const BatchnormShape& sh = a.sh;
  cudaStream_t stream = phase_stream(*a.ctx, sh, what);
  const T* x = half16_data<T>(a.x);
  T* y = half16_data<T>(a.y);
  const double count = static_cast<double>(sh.N * sh.H * sh.W);
  const ChannelShift<float> shift{a.running_mean, 1, a.mean_offset};
  const NormFromOwnSums stat{count,          sh.eps,         sh.momentum,   a.gamma,
                             a.beta,         a.running_mean, a.running_var, a.save_mean,
                             a.save_inv_std, CollectTail{static_cast<int>(sh.C), count, a.stats, nullptr, nullptr, nullptr},
                             a.mean_offset};
  bool ran = false;
  with_epilogue(a.act, [&](auto epi) {
    ran = launch_one_kernel_nhwc(
        *a.ctx, stream, sh, nhwc_vectorized(sh, {x, y}), path, what,
        [&](auto width) { return ShiftedTerms<decltype(width)::value, ChannelShift<float>, T>{x, shift}; }, stat,
        [&](auto width) { return NormalizeOut<decltype(width)::value, decltype(epi), T>{epi, y}; });
  });
  if (ran) {
    CUDA_CHECK_LAUNCH("batchnorm forward nhwc (one kernel)");
    return;
  }
  forward_train_act_phases(a);
}

template <typename T>
static void backward_act_nhwc(const BatchnormBackwardAct& a, NhwcPath path) {
  const char* what = "batchnorm backward";
  const BatchnormShape& sh = a.sh;
  cudaStream_t stream = phase_stream(*a.ctx, sh, what);
  const T *x = half16_data<T>(a.x), *dy = half16_data<T>(a.dy);
  const bool from_z = batchnorm_grad_from_z(a.act, a.gamma, a.beta);
  const T* y_read = a.act && !from_z ? half16_data<T>(a.y) : nullptr;
  T* dx = half16_data<T>(a.dx);
  const double count = static_cast<double>(sh.N * sh.H * sh.W);
  const PreActivation pre{a.gamma, a.save_inv_std, from_z ? a.beta : nullptr};
  const CoefFromOwnSums stat{
      count, a.gamma, a.save_mean, a.save_inv_std,
      CollectTail{static_cast<int>(sh.C), count, a.sums, a.save_inv_std, a.dgamma, a.dbeta}, pre};
  bool ran = false;
  with_grad_epilogue(a.act, from_z, [&](auto epi) {
    ran = launch_one_kernel_nhwc(
        *a.ctx, stream, sh, nhwc_vectorized(sh, {x, y_read, dy, dx}), path, what,
        [&](auto width) {
          return GradTerms<decltype(width)::value, decltype(epi), T>{epi, x, y_read, dy, a.save_mean, pre};
        },
        stat, [&](auto width) { return DxOut<decltype(width)::value, decltype(epi), T>{epi, y_read != nullptr, dx}; });
  });
  if (ran) {
    CUDA_CHECK_LAUNCH("batchnorm backward nhwc (one kernel)");
    return;
  }
  backward_act_phases(a);
}

void batchnorm_forward_train_act_cuda_bf16(const BatchnormForwardTrainAct& a) {
  forward_train_act_nhwc<bf16>(a, default_nhwc_path());
}
void batchnorm_forward_train_act_cuda_f16(const BatchnormForwardTrainAct& a) {
  forward_train_act_nhwc<f16>(a, default_nhwc_path());
}
void batchnorm_forward_train_act_cuda_bf16_one(const BatchnormForwardTrainAct& a) {
  forward_train_act_nhwc<bf16>(a, NhwcPath::one);
}
void batchnorm_forward_train_act_cuda_f16_one(const BatchnormForwardTrainAct& a) {
  forward_train_act_nhwc<f16>(a, NhwcPath::one);
}
void batchnorm_forward_train_act_cuda_bf16_two(const BatchnormForwardTrainAct& a) {
  forward_train_act_nhwc<bf16>(a, NhwcPath::two);
}
void batchnorm_forward_train_act_cuda_f16_two(const BatchnormForwardTrainAct& a) {
  forward_train_act_nhwc<f16>(a, NhwcPath::two);
}
void batchnorm_backward_act_cuda_bf16(const BatchnormBackwardAct& a) { backward_act_nhwc<bf16>(a, default_nhwc_path()); }
void batchnorm_backward_act_cuda_f16(const BatchnormBackwardAct& a) { backward_act_nhwc<f16>(a, default_nhwc_path()); }
void batchnorm_backward_act_cuda_bf16_one(const BatchnormBackwardAct& a) { backward_act_nhwc<bf16>(a, NhwcPath::one); }
void batchnorm_backward_act_cuda_f16_one(const BatchnormBackwardAct& a) { backward_act_nhwc<f16>(a, NhwcPath::one); }
void batchnorm_backward_act_cuda_bf16_two(const BatchnormBackwardAct& a) { backward_act_nhwc<bf16>(a, NhwcPath::two); }
void batchnorm_backward_act_cuda_f16_two(const BatchnormBackwardAct& a) { backward_act_nhwc<f16>(a, NhwcPath::two); }
void batchnorm_forward_train_act_cuda_f32cl(const BatchnormForwardTrainAct& a) {
  forward_train_act_nhwc<float>(a, default_nhwc_path());
}
void batchnorm_forward_train_act_cuda_f32cl_one(const BatchnormForwardTrainAct& a) {
  forward_train_act_nhwc<float>(a, NhwcPath::one);
}
void batchnorm_forward_train_act_cuda_f32cl_two(const BatchnormForwardTrainAct& a) {
  forward_train_act_nhwc<float>(a, NhwcPath::two);
}
void batchnorm_backward_act_cuda_f32cl(const BatchnormBackwardAct& a) {
  backward_act_nhwc<float>(a, default_nhwc_path());
}
void batchnorm_backward_act_cuda_f32cl_one(const BatchnormBackwardAct& a) {
  backward_act_nhwc<float>(a, NhwcPath::one);
}
void batchnorm_backward_act_cuda_f32cl_two(const BatchnormBackwardAct& a) {
  backward_act_nhwc<float>(a, NhwcPath::two);
}

}  // namespace cnn
