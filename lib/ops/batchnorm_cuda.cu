// Batch normalisation on the GPU with the CPU fast path's arithmetic: per-channel double partial
// sums over fixed slices (grid slices x C, fixed-order block sums) whose last block per channel
// adds them in slice order and finalizes the channel, then one elementwise pass. Slicing depends on
// the shape only: bitwise repeatable.
// The bf16, f16 and f32cl rows run the channels-last kernels of batchnorm_nhwc_bf16.cuh (T = bf16, f16,
// float) with the same tails.
// Trap: statistics sum x - x0 (x0 = the channel's first value) as on the CPU, because
// sum(x^2) - sum(x)^2/M in any precision loses the variance of large-mean channels.
#include <algorithm>

#include "core/cuda_check.h"
#include "ops/batchnorm.h"
#include "ops/batchnorm.cuh"
#include "ops/batchnorm_nchw_one.cuh"
#include "ops/batchnorm_nhwc_bf16.cuh"
#include "ops/reduce.cuh"

namespace cnn {

// Tail of the forward sums (thread 0 of a channel's last block): mean, variance, running
// statistics, and the (mean, scale) the normalisation pass uses, as batchnorm_forward_train_cpu.
template <typename T>
struct ForwardFinalize {
  int M;
  double eps, momentum;
  ChannelShift<T> shift;               // the channel's first value of x, the sums' shift
  const float* __restrict__ gamma;     // (C)
  float* __restrict__ running_mean;    // (C)
  float* __restrict__ running_var;     // (C)
  float* __restrict__ save_mean;       // (C)
  float* __restrict__ save_inv_std;    // (C)
  float* __restrict__ norm_mean;       // (C); unused by channel
  float* __restrict__ norm_scale;      // (C); unused by channel
  const float* __restrict__ mean_offset;  // (C) or null: added to the batch mean in running_mean
  // Channel c's (mean, scale) from its sums about x0 (shift(c)); with `owner` also its running and
  // saved statistics.
  __device__ void channel(int c, double s, double ss, double x0, bool owner, float& n_mean, float& n_scale) const {
    const double m = static_cast<double>(M);
    const double mean = x0 + s / m;
    const double var = fmax(0.0, (ss - s * s / m) / m);
    const double inv_std = 1.0 / sqrt(var + eps);
    const float mean_f = static_cast<float>(mean);
    if (owner) {
      const double unbiased = var * m / (m - 1.0);
      running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] +
                                           momentum * batchnorm_running_input(mean, mean_offset, c));
      running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
      save_mean[c] = mean_f;
      save_inv_std[c] = static_cast<float>(inv_std);
    }
    n_mean = mean_f;
    n_scale = static_cast<float>(static_cast<double>(gamma[c]) * inv_std);
  }
  __device__ void operator()(int c, double s, double ss) const {
    channel(c, s, ss, shift(c), true, norm_mean[c], norm_scale[c]);
  }
};

// Tail of the backward sums: dgamma, dbeta and the coefficients of dx = a (dy - b - (x - mean) k).
struct BackwardFinalize {
  int C, M;
  const float* __restrict__ gamma;         // (C)
  const float* __restrict__ save_inv_std;  // (C)
  float* __restrict__ dgamma;              // (C) or null
  float* __restrict__ dbeta;               // (C) or null
  float* __restrict__ coef;                // (3, C): a, b, k; unused by channel
  // Channel c's (a, b, k); with `owner` also its dgamma and dbeta.
  __device__ void channel(int c, double sum_dy, double sum_dy_xc, bool owner, float& a, float& b, float& k) const {
    const double inv_std = save_inv_std[c];
    const double sum_dy_xhat = sum_dy_xc * inv_std;
    if (owner && dgamma) dgamma[c] = static_cast<float>(sum_dy_xhat);
    if (owner && dbeta) dbeta[c] = static_cast<float>(sum_dy);
    const double m = static_cast<double>(M);
    a = static_cast<float>(gamma[c] * inv_std);
    b = static_cast<float>(sum_dy / m);
    k = static_cast<float>(inv_std * sum_dy_xhat / m);
  }
  __device__ void operator()(int c, double sum_dy, double sum_dy_xc) const {
    channel(c, sum_dy, sum_dy_xc, true, coef[c], coef[C + c], coef[2 * C + c]);
  }
};

// The one-kernel paths' per-channel steps (the stat of batchnorm_one_kernel_nhwc_kernel and of
// batchnorm_nchw_one.cuh's kernels): forward,
// ForwardFinalize's arithmetic about x0 = x[c] read before the barrier, cf = (mean, scale, beta);
// backward, BackwardFinalize's, cf = (a, b, k, save_mean).
template <typename T>
struct ForwardTrainStat {
  ForwardFinalize<T> fin;
  const float* __restrict__ beta;  // (C)
  static constexpr int kCoefs = 4;
  __device__ float before(int c) const { return static_cast<float>(fin.shift(c)); }
  __device__ void operator()(int c, double s, double ss, float x0, bool owner, float (&cf)[4]) const {
    fin.channel(c, s, ss, x0, owner, cf[0], cf[1]);
    cf[2] = beta[c];
    cf[3] = 0.0f;
  }
};
struct BackwardStat {
  BackwardFinalize fin;
  const float* __restrict__ save_mean;  // (C)
  static constexpr int kCoefs = 4;
  __device__ float before(int) const { return 0.0f; }
  __device__ void operator()(int c, double s, double sx, float, bool owner, float (&cf)[4]) const {
    fin.channel(c, s, sx, owner, cf[0], cf[1], cf[2]);
    cf[3] = save_mean[c];
  }
};

static void check_shape(const char* what, const BatchnormShape& sh) {
  batchnorm_check_shape(what, sh);
  check_cuda_limits(what, sh);
}

// The f32 NCHW rows: one kernel where `path` and the shape allow (batchnorm_nchw_one.cuh), else the
// sums pass and the normalise pass.
static void forward_train_f32(const BatchnormForwardTrain& a, NhwcPath path) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const float *x = a.x.f32(), *gamma = a.gamma, *beta = a.beta;
  float *y = a.y.f32(), *running_mean = a.running_mean, *running_var = a.running_var, *save_mean = a.save_mean,
      *save_inv_std = a.save_inv_std;
  const char* what = "batchnorm forward";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_shape(what, sh);
  batchnorm_check_training_count(what, sh);
  const int slices = slices_for(sh), C = static_cast<int>(sh.C);
  const ChannelLayout L = layout_of(sh);
  const ChannelShift<float> shift{x, L.HW};  // the channel's first value
  auto finalize = [&](float* norm_mean, float* norm_scale) {
    return ForwardFinalize<float>{L.M,         sh.eps,    sh.momentum,  shift,     gamma,      running_mean,
                                  running_var, save_mean, save_inv_std, norm_mean, norm_scale, a.mean_offset};
  };
  if (forward_one_kernel_nchw(ctx, stream, sh, path, what, NoActivation{}, shift,
                              ForwardTrainStat<float>{finalize(nullptr, nullptr), beta}, x, y)) {
    CUDA_CHECK_LAUNCH("batchnorm forward (one kernel)");
    return;
  }
  const Scratch s = scratch(ctx, sh, slices, 2 * sh.C, what);
  float* norm_mean = s.per_channel;
  float* norm_scale = s.per_channel + C;
  const ForwardFinalize<float> tail = finalize(norm_mean, norm_scale);
  batchnorm_forward_stats_kernel<<<dim3(slices, C), kThreads, 0, stream>>>(
      L, x, shift, s.partial, channel_counters(ctx, sh, what), tail);
  CUDA_CHECK_LAUNCH("batchnorm forward (statistics)");
  launch_normalize(stream, sh, NoActivation{}, NormFromArrays{norm_mean, norm_scale}, x, beta, y, nullptr);
  CUDA_CHECK_LAUNCH("batchnorm forward (normalize)");
}

void batchnorm_forward_infer_cuda(const BatchnormForwardInfer& a) {
  // The phased path without an activation, after the stricter checks (N > 0, eps, momentum); its
  // row of the operands' dtype runs, so this is the bf16 row too.
  check_shape("batchnorm inference", a.sh);
  run_op(Backend::cuda, BatchnormForwardInferAct{a.ctx, a.sh, a.x, a.gamma, a.beta, a.running_mean, a.running_var,
                                                 nullptr, a.y, a.mean_offset});
}

static void backward_f32(const BatchnormBackward& a, NhwcPath path) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const float *x = a.x.f32(), *gamma = a.gamma, *save_mean = a.save_mean, *save_inv_std = a.save_inv_std,
      *dy = a.dy.f32();
  float *dx = a.dx.f32(), *dgamma = a.dgamma, *dbeta = a.dbeta;
  const char* what = "batchnorm backward";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_shape(what, sh);
  const int slices = slices_for(sh), C = static_cast<int>(sh.C);
  const ChannelLayout L = layout_of(sh);
  if (backward_one_kernel_nchw(ctx, stream, sh, path, what, NoActivation{},
                               BackwardStat{BackwardFinalize{C, L.M, gamma, save_inv_std, dgamma, dbeta, nullptr},
                                            save_mean},
                               x, nullptr, save_mean, dy, dx)) {
    CUDA_CHECK_LAUNCH("batchnorm backward (one kernel)");
    return;
  }
  const Scratch s = scratch(ctx, sh, slices, 3 * sh.C, what);
  const BackwardFinalize tail{C, L.M, gamma, save_inv_std, dgamma, dbeta, s.per_channel};
  batchnorm_backward_stats_act_kernel<<<dim3(slices, C), kThreads, 0, stream>>>(
      L, NoActivation{}, x, nullptr, save_mean, dy, s.partial, channel_counters(ctx, sh, what), tail);
  CUDA_CHECK_LAUNCH("batchnorm backward (sums)");
  if (!dx) return;
  launch_dx(stream, sh, NoActivation{}, CoefFromArray{C, s.per_channel}, save_mean, x, nullptr, dy, dx);
  CUDA_CHECK_LAUNCH("batchnorm backward (dx)");
}

// BF16, F16 and F32CL (T = float) channels-last: the same sums and tails over (N, H, W, C); x0 is
// x[c], the channel's first value there too. One kernel where `path` and the shape allow
// (launch_one_kernel_nhwc), else the sums pass and the normalise pass.
template <typename T>
static void forward_train_nhwc(const BatchnormForwardTrain& a, NhwcPath path) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const T* x = half16_data<T>(a.x);
  T* y = half16_data<T>(a.y);
  const char* what = "batchnorm forward";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_shape(what, sh);
  batchnorm_check_training_count(what, sh);
  const int M = static_cast<int>(sh.N * sh.H * sh.W);
  const ChannelShift<T> shift{x, 1};
  auto finalize = [&](float* norm_mean, float* norm_scale) {
    return ForwardFinalize<T>{M,         sh.eps,         sh.momentum, shift,     a.gamma,   a.running_mean,
                              a.running_var, a.save_mean, a.save_inv_std, norm_mean, norm_scale, a.mean_offset};
  };
  auto terms = [&](auto width) { return ShiftedTerms<decltype(width)::value, ChannelShift<T>, T>{x, shift}; };
  if (launch_one_kernel_nhwc(
          ctx, stream, sh, nhwc_vectorized(sh, {x, y}), path, what, terms,
          ForwardTrainStat<T>{finalize(nullptr, nullptr), a.beta},
          [&](auto width) { return NormalizeOut<decltype(width)::value, NoActivation, T>{NoActivation{}, y}; })) {
    CUDA_CHECK_LAUNCH("batchnorm forward nhwc (one kernel)");
    return;
  }
  // The tail writes the normalisation's (mean, scale) into the scratch's (2, C) floats.
  const Scratch s = launch_sums_nhwc(ctx, stream, sh, nhwc_vectorized(sh, {x}), 2 * sh.C, what, terms,
                                     [&](const Scratch& sc) { return finalize(sc.per_channel, sc.per_channel + sh.C); });
  CUDA_CHECK_LAUNCH("batchnorm forward nhwc (statistics)");
  launch_normalize_nhwc(stream, sh, nullptr, NormFromArrays{s.per_channel, s.per_channel + sh.C}, x, a.beta, y,
                        nullptr);
  CUDA_CHECK_LAUNCH("batchnorm forward nhwc (normalize)");
}

template <typename T>
static void backward_nhwc(const BatchnormBackward& a, NhwcPath path) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const T *x = half16_data<T>(a.x), *dy = half16_data<T>(a.dy);
  T* dx = half16_data<T>(a.dx);
  const char* what = "batchnorm backward";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_shape(what, sh);
  const int C = static_cast<int>(sh.C), M = static_cast<int>(sh.N * sh.H * sh.W);
  auto finalize = [&](float* coef) { return BackwardFinalize{C, M, a.gamma, a.save_inv_std, a.dgamma, a.dbeta, coef}; };
  auto terms = [&](auto width) {
    return GradTerms<decltype(width)::value, NoActivation, T>{NoActivation{}, x, nullptr, dy, a.save_mean};
  };
  if (launch_one_kernel_nhwc(
          ctx, stream, sh, nhwc_vectorized(sh, {x, dy, dx}), path, what, terms,
          BackwardStat{finalize(nullptr), a.save_mean},
          [&](auto width) { return DxOut<decltype(width)::value, NoActivation, T>{NoActivation{}, false, dx}; })) {
    CUDA_CHECK_LAUNCH("batchnorm backward nhwc (one kernel)");
    return;
  }
  // The tail writes dx's coefficients (a, b, k) into the scratch's (3, C) floats.
  const Scratch s = launch_sums_nhwc(ctx, stream, sh, nhwc_vectorized(sh, {x, dy}), 3 * sh.C, what, terms,
                                     [&](const Scratch& sc) { return finalize(sc.per_channel); });
  CUDA_CHECK_LAUNCH("batchnorm backward nhwc (sums)");
  if (!dx) return;
  launch_dx_nhwc(stream, sh, nullptr, CoefFromArray{C, s.per_channel}, a.save_mean, x, static_cast<const T*>(nullptr),
                 dy, dx, PreActivation{});
  CUDA_CHECK_LAUNCH("batchnorm backward nhwc (dx)");
}

void batchnorm_forward_train_cuda(const BatchnormForwardTrain& a) { forward_train_f32(a, default_nhwc_path()); }
void batchnorm_forward_train_cuda_f32_one(const BatchnormForwardTrain& a) { forward_train_f32(a, NhwcPath::one); }
void batchnorm_forward_train_cuda_f32_two(const BatchnormForwardTrain& a) { forward_train_f32(a, NhwcPath::two); }
void batchnorm_backward_cuda(const BatchnormBackward& a) { backward_f32(a, default_nhwc_path()); }
void batchnorm_backward_cuda_f32_one(const BatchnormBackward& a) { backward_f32(a, NhwcPath::one); }
void batchnorm_backward_cuda_f32_two(const BatchnormBackward& a) { backward_f32(a, NhwcPath::two); }

bool batchnorm_one_kernel_fits(const BatchnormShape& sh) { return nhwc_one_kernel_fits(sh); }
bool batchnorm_one_kernel_nchw_fits(const BatchnormShape& sh) { return nchw_one_kernel_fits(sh); }

void batchnorm_forward_train_cuda_bf16(const BatchnormForwardTrain& a) { forward_train_nhwc<bf16>(a, default_nhwc_path()); }
void batchnorm_forward_train_cuda_f16(const BatchnormForwardTrain& a) { forward_train_nhwc<f16>(a, default_nhwc_path()); }
void batchnorm_backward_cuda_bf16(const BatchnormBackward& a) { backward_nhwc<bf16>(a, default_nhwc_path()); }
void batchnorm_backward_cuda_f16(const BatchnormBackward& a) { backward_nhwc<f16>(a, default_nhwc_path()); }
void batchnorm_forward_train_cuda_bf16_one(const BatchnormForwardTrain& a) { forward_train_nhwc<bf16>(a, NhwcPath::one); }
void batchnorm_forward_train_cuda_f16_one(const BatchnormForwardTrain& a) { forward_train_nhwc<f16>(a, NhwcPath::one); }
void batchnorm_forward_train_cuda_bf16_two(const BatchnormForwardTrain& a) { forward_train_nhwc<bf16>(a, NhwcPath::two); }
void batchnorm_forward_train_cuda_f16_two(const BatchnormForwardTrain& a) { forward_train_nhwc<f16>(a, NhwcPath::two); }
void batchnorm_backward_cuda_bf16_one(const BatchnormBackward& a) { backward_nhwc<bf16>(a, NhwcPath::one); }
void batchnorm_backward_cuda_f16_one(const BatchnormBackward& a) { backward_nhwc<f16>(a, NhwcPath::one); }
void batchnorm_backward_cuda_bf16_two(const BatchnormBackward& a) { backward_nhwc<bf16>(a, NhwcPath::two); }
void batchnorm_backward_cuda_f16_two(const BatchnormBackward& a) { backward_nhwc<f16>(a, NhwcPath::two); }
void batchnorm_forward_train_cuda_f32cl(const BatchnormForwardTrain& a) {
  forward_train_nhwc<float>(a, default_nhwc_path());
}
void batchnorm_backward_cuda_f32cl(const BatchnormBackward& a) { backward_nhwc<float>(a, default_nhwc_path()); }
void batchnorm_forward_train_cuda_f32cl_one(const BatchnormForwardTrain& a) {
  forward_train_nhwc<float>(a, NhwcPath::one);
}
void batchnorm_forward_train_cuda_f32cl_two(const BatchnormForwardTrain& a) {
  forward_train_nhwc<float>(a, NhwcPath::two);
}
void batchnorm_backward_cuda_f32cl_one(const BatchnormBackward& a) { backward_nhwc<float>(a, NhwcPath::one); }
void batchnorm_backward_cuda_f32cl_two(const BatchnormBackward& a) { backward_nhwc<float>(a, NhwcPath::two); }

}  // namespace cnn
