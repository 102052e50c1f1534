// Phased batchnorm on the CPU (see batchnorm.h): per-channel sums of this rank, the normalisation
// from sums a caller may have added over the ranks (sync batchnorm), and a fused activation
// epilogue whose backward reads the saved output y, or, for a sign-only activation given beta,
// recomputes the activation's input from x (batchnorm.h).
// Trap: every phase accepts N = 0 (a rank without samples joins the reductions with zeros), and
// dgamma/dbeta are this rank's share: the gradient reducer sums them over the ranks later.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/activation_math.h"
#include "ops/batchnorm.h"
#include "ops/batchnorm_cpu.h"
#include "ops/simd_clones.h"

namespace cnn {

static void check_phase_shape(const char* what, const BatchnormShape& sh) {
  if (sh.N < 0 || sh.C <= 0 || sh.H <= 0 || sh.W <= 0)
    CNN_THROW("batchnorm {}: sizes must be positive (N may be 0), got N={} C={} H={} W={}", what, sh.N, sh.C, sh.H,
              sh.W);
}

// The activation's epilogue, with the kind switch hoisted out of the element loop.
CNN_SIMD_CLONES static void activate_in_place(const ActivationParams* act, float* y, int64_t n) {
  if (!act) return;
  const float alpha = act->alpha;
  switch (act->kind) {
#define CNN_BN_ACT_CASE(K)                                                                     \
  case ActivationKind::K:                                                                      \
    for (int64_t i = 0; i < n; ++i) y[i] = activation_forward_value(ActivationKind::K, alpha, y[i]); \
    return;
    CNN_BN_ACT_CASE(relu)
    CNN_BN_ACT_CASE(leaky_relu)
    CNN_BN_ACT_CASE(elu)
    CNN_BN_ACT_CASE(sigmoid)
    CNN_BN_ACT_CASE(tanh)
#undef CNN_BN_ACT_CASE
  }
}

// g (n) = act'(y) dy over one plane, the kind switch hoisted out of the element loop; without an
// activation g is dy itself (returned, nothing copied). `buf` holds n floats.
CNN_SIMD_CLONES static const float* fused_grad_plane(const ActivationParams* act, const float* y, const float* dy,
                                                     float* buf, int64_t n) {
  if (!act) return dy;
  const float alpha = act->alpha;
  switch (act->kind) {
#define CNN_BN_GRAD_CASE(K)                                                                            \
  case ActivationKind::K:                                                                              \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) buf[i] =                                       \
        activation_backward_from_output(ActivationKind::K, alpha, y[i], dy[i]);                        \
    break;
    CNN_BN_GRAD_CASE(relu)
    CNN_BN_GRAD_CASE(leaky_relu)
    CNN_BN_GRAD_CASE(elu)
    CNN_BN_GRAD_CASE(sigmoid)
    CNN_BN_GRAD_CASE(tanh)
#undef CNN_BN_GRAD_CASE
  }
  return buf;
}

// g (n) = act'(z) dy over one plane of a sign-only activation (batchnorm.h: "A sign-only
// activation's derivative"), z = batchnorm_pre_activation(x, mean, scale, beta): y is not read.
CNN_SIMD_CLONES static const float* sign_grad_plane(const ActivationParams& act, const float* x, float mean,
                                                    float scale, float beta, const float* dy, float* buf,
                                                    int64_t n) {
  const float alpha = act.alpha;
  switch (act.kind) {
#define CNN_BN_SIGN_CASE(K)                                                                                    \
  case ActivationKind::K:                                                                                      \
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) buf[i] = activation_backward_from_output(              \
        ActivationKind::K, alpha, batchnorm_pre_activation(x[i], mean, scale, beta), dy[i]);                 \
    break;
    CNN_BN_SIGN_CASE(relu)
    CNN_BN_SIGN_CASE(leaky_relu)
#undef CNN_BN_SIGN_CASE
    default: CNN_THROW("batchnorm backward: activation kind {} is not sign-only", static_cast<int>(act.kind));
  }
  return buf;
}

void batchnorm_forward_stats_cpu(const BatchnormForwardStats& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const float *x = a.x.f32(), *running_mean = a.running_mean;
  double* stats = a.stats;
  check_phase_shape("forward statistics", sh);
  const int64_t N = sh.N, C = sh.C, HW = sh.H * sh.W;
  const int threads = ctx.threads();
#pragma omp parallel for num_threads(threads) if (N * C * HW >= (int64_t{1} << 14)) schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    double s, ss;
    batchnorm_shifted_sums_cpu(x, N, C, HW, c, batchnorm_shift_of(running_mean, a.mean_offset, c), s, ss);
    stats[c] = s;
    stats[C + c] = ss;
  }
  stats[2 * C] = static_cast<double>(N * HW);
}

void batchnorm_forward_apply_cpu(const BatchnormForwardApply& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const double* stats = a.stats;
  const float *x = a.x.f32(), *gamma = a.gamma, *beta = a.beta;
  const ActivationParams* act = a.act;
  float *y = a.y.f32(), *running_mean = a.running_mean, *running_var = a.running_var, *save_mean = a.save_mean,
      *save_inv_std = a.save_inv_std;
  check_phase_shape("forward", sh);
  const int64_t N = sh.N, C = sh.C, HW = sh.H * sh.W;
  const double M = stats[2 * C];
  if (!(M >= 2.0))
    CNN_THROW("batchnorm forward: training needs more than one value per channel over all ranks, got {}", M);
  const double momentum = sh.momentum;
  const int threads = ctx.threads();
#pragma omp parallel for num_threads(threads) if (N * C * HW >= (int64_t{1} << 14)) schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    const double d_mean = stats[c] / M;  // of d = x - shift, the stats' shift
    const double mean = static_cast<double>(batchnorm_shift_of(running_mean, a.mean_offset, c)) + d_mean;
    const double var = std::max(0.0, stats[C + c] / M - d_mean * d_mean);
    const double inv_std = 1.0 / std::sqrt(var + sh.eps);
    const float mean_f = static_cast<float>(mean);
    const float scale = static_cast<float>(static_cast<double>(gamma[c]) * inv_std), bias = beta[c];
    batchnorm_normalize_channel_cpu(x, y, N, C, HW, c, mean_f, scale, bias,
                                    [&](float* yp) { activate_in_place(act, yp, HW); });
    // PyTorch's SyncBatchNorm: the unbiased variance over the global count.
    batchnorm_update_statistics_cpu(momentum, M, mean, var, inv_std, c, running_mean, running_var, save_mean,
                                    save_inv_std, a.mean_offset);
  }
}

void batchnorm_forward_infer_act_cpu(const BatchnormForwardInferAct& a) {
  run_op(Backend::cpu,
         BatchnormForwardInfer{a.ctx, a.sh, a.x, a.gamma, a.beta, a.running_mean, a.running_var, a.y, a.mean_offset});
  const ActivationParams* act = a.act;
  float* y = a.y.f32();
  const int64_t N = a.sh.N, C = a.sh.C, HW = a.sh.H * a.sh.W;
  const int threads = a.ctx->threads();
#pragma omp parallel for num_threads(threads) if (N * C * HW >= (int64_t{1} << 15)) schedule(static)
  for (int64_t nc = 0; nc < N * C; ++nc) activate_in_place(act, y + nc * HW, HW);
}

void batchnorm_backward_stats_cpu(const BatchnormBackwardStats& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const float *x = a.x.f32(), *y = a.y.f32(), *save_mean = a.save_mean, *save_inv_std = a.save_inv_std,
      *dy = a.dy.f32();
  const ActivationParams* act = a.act;
  double* sums = a.sums;
  float *dgamma = a.dgamma, *dbeta = a.dbeta;
  const bool from_z = batchnorm_grad_from_z(act, a.gamma, a.beta);  // y is not read
  check_phase_shape("backward statistics", sh);
  const int64_t N = sh.N, C = sh.C, HW = sh.H * sh.W;
  const int threads = ctx.threads();
  const int64_t buf_stride = (HW + 15) / 16 * 16 + 16;  // threads' planes never share a cache line
  std::vector<float> bufs(act ? size_t(threads * buf_stride) : 0);  // one plane of g per thread
#pragma omp parallel num_threads(threads) if (N * C * HW >= (int64_t{1} << 14))
  {
  float* buf = act ? bufs.data() + omp_get_thread_num() * buf_stride : nullptr;
#pragma omp for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    const float mean = save_mean[c];
    const float scale = from_z ? batchnorm_saved_scale(a.gamma[c], save_inv_std[c]) : 0.0f;
    double sum_g = 0.0, sum_g_xc = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t base = (n * C + c) * HW;
      const float* g = from_z ? sign_grad_plane(*act, x + base, mean, scale, a.beta[c], dy + base, buf, HW)
                              : fused_grad_plane(act, y + base, dy + base, buf, HW);
      batchnorm_grad_sums_plane_cpu(g, x + base, mean, HW, sum_g, sum_g_xc);
    }
    sums[c] = sum_g;
    sums[C + c] = sum_g_xc;
    if (dgamma) dgamma[c] = static_cast<float>(sum_g_xc * static_cast<double>(save_inv_std[c]));
    if (dbeta) dbeta[c] = static_cast<float>(sum_g);
  }
  }
  sums[2 * C] = static_cast<double>(N * HW);
}

void batchnorm_backward_apply_cpu(const BatchnormBackwardApply& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const double* sums = a.sums;
  const float *x = a.x.f32(), *y = a.y.f32(), *gamma = a.gamma, *save_mean = a.save_mean,
      *save_inv_std = a.save_inv_std, *dy = a.dy.f32();
  const ActivationParams* act = a.act;
  float* dx = a.dx.f32();
  const float* beta = a.beta;
  const bool from_z = batchnorm_grad_from_z(act, gamma, beta);  // y is not read
  check_phase_shape("backward", sh);
  const int64_t N = sh.N, C = sh.C, HW = sh.H * sh.W;
  const double M = sums[2 * C];
  if (N == 0 || !dx) return;
  const int threads = ctx.threads();
  const int64_t buf_stride = (HW + 15) / 16 * 16 + 16;  // threads' planes never share a cache line
  std::vector<float> bufs(act ? size_t(threads * buf_stride) : 0);  // one plane of g per thread
#pragma omp parallel num_threads(threads) if (N * C * HW >= (int64_t{1} << 14))
  {
  float* buf = act ? bufs.data() + omp_get_thread_num() * buf_stride : nullptr;
#pragma omp for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    const float mean = save_mean[c];
    const double inv_std = save_inv_std[c];
    const double sum_g_xhat = sums[C + c] * inv_std;
    const float a = static_cast<float>(gamma[c] * inv_std);
    const float b = static_cast<float>(sums[c] / M);
    const float k = static_cast<float>(inv_std * sum_g_xhat / M);
    const float scale = from_z ? batchnorm_saved_scale(gamma[c], save_inv_std[c]) : 0.0f;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t base = (n * C + c) * HW;
      // g may be dy itself, which dx may alias: each element is read before it is written.
      const float* g = from_z ? sign_grad_plane(*act, x + base, mean, scale, beta[c], dy + base, buf, HW)
                              : fused_grad_plane(act, y + base, dy + base, buf, HW);
      batchnorm_grad_apply_plane_cpu(g, x + base, dx + base, mean, a, b, k, HW);
    }
  }
  }
}

// The one-rank pairs: the two phases' rows of the operands' dtype (cpu f32, or the bf16/f16
// emulation), so their results are those of the phases called one after the other.
void batchnorm_forward_train_act_cpu(const BatchnormForwardTrainAct& a) {
  run_op(Backend::cpu, BatchnormForwardStats{a.ctx, a.sh, a.x, a.running_mean, a.stats, a.mean_offset});
  run_op(Backend::cpu, BatchnormForwardApply{a.ctx, a.sh, a.stats, a.x, a.gamma, a.beta, a.act, a.y, a.running_mean,
                                             a.running_var, a.save_mean, a.save_inv_std, a.mean_offset});
}

void batchnorm_backward_act_cpu(const BatchnormBackwardAct& a) {
  run_op(Backend::cpu, BatchnormBackwardStats{a.ctx, a.sh, a.x, a.y, a.act, a.save_mean, a.save_inv_std, a.dy, a.sums,
                                              a.dgamma, a.dbeta, a.gamma, a.beta});
  run_op(Backend::cpu, BatchnormBackwardApply{a.ctx, a.sh, a.sums, a.x, a.y, a.act, a.gamma, a.save_mean,
                                              a.save_inv_std, a.dy, a.dx, a.beta});
}

}  // namespace cnn
