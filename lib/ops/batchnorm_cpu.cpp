// Batch normalisation on the CPU: a two-pass reference in double and a fast path that threads over
// channels and reads x once for the statistics (sums shifted by the channel's first value, in double).
// Trap: normalisation uses the biased variance, running_var the unbiased one (PyTorch), and the
// backward must use save_mean/save_inv_std of the same forward, never the running statistics.
#include <algorithm>
#include <cmath>

#include "core/checked.h"
#include "core/error.h"
#include "ops/batchnorm.h"
#include "ops/batchnorm_cpu.h"
#include "ops/simd_clones.h"

namespace cnn {

void batchnorm_check_shape(const char* what, const BatchnormShape& sh) {
  if (sh.N <= 0 || sh.C <= 0 || sh.H <= 0 || sh.W <= 0)
    CNN_THROW("{}: sizes must be positive, got N={} C={} H={} W={}", what, sh.N, sh.C, sh.H, sh.W);
  check_tensor_cap(checked_product({sh.N, sh.C, sh.H, sh.W}),
                   fmt::format("{}: the input (N={}, C={}, H={}, W={})", what, sh.N, sh.C, sh.H, sh.W));
  if (!(sh.eps >= 0.0)) CNN_THROW("{}: eps must be non-negative, got {}", what, sh.eps);
  if (!(sh.momentum >= 0.0 && sh.momentum <= 1.0))
    CNN_THROW("{}: momentum must be in [0, 1], got {}", what, sh.momentum);
}

void batchnorm_check_training_count(const char* what, const BatchnormShape& sh) {
  if (sh.N * sh.H * sh.W < 2)
    CNN_THROW("{}: training needs more than one value per channel, got N*H*W = {} (N={} H={} W={})", what,
              sh.N * sh.H * sh.W, sh.N, sh.H, sh.W);
}

static void check_training_shape(const BatchnormShape& sh) {
  batchnorm_check_shape("batchnorm forward", sh);
  batchnorm_check_training_count("batchnorm forward", sh);
}

template <typename T>
void batchnorm_forward_train_reference(const ExecContext& ctx, const BatchnormShape& sh,
                                       const T* x,            // (N, C, H, W)
                                       const T* gamma,        // (C)
                                       const T* beta,         // (C)
                                       T* y,                  // (N, C, H, W)
                                       T* running_mean,       // (C)
                                       T* running_var,        // (C)
                                       T* save_mean,          // (C)
                                       T* save_inv_std) {     // (C)
  check_training_shape(sh);
  const int64_t HW = sh.H * sh.W, M = sh.N * HW;
  for (int64_t c = 0; c < sh.C; ++c) {
    double sum = 0.0;
    for (int64_t n = 0; n < sh.N; ++n)
      for (int64_t i = 0; i < HW; ++i) sum += static_cast<double>(x[(n * sh.C + c) * HW + i]);
    const double mean = sum / static_cast<double>(M);
    double sq = 0.0;
    for (int64_t n = 0; n < sh.N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        double d = static_cast<double>(x[(n * sh.C + c) * HW + i]) - mean;
        sq += d * d;
      }
    const double var = sq / static_cast<double>(M);
    const double inv_std = 1.0 / std::sqrt(var + sh.eps);
    for (int64_t n = 0; n < sh.N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t at = (n * sh.C + c) * HW + i;
        y[at] = static_cast<T>(static_cast<double>(gamma[c]) * (static_cast<double>(x[at]) - mean) * inv_std +
                               static_cast<double>(beta[c]));
      }
    const double unbiased = var * static_cast<double>(M) / static_cast<double>(M - 1);
    running_mean[c] = static_cast<T>((1.0 - sh.momentum) * running_mean[c] + sh.momentum * mean);
    running_var[c] = static_cast<T>((1.0 - sh.momentum) * running_var[c] + sh.momentum * unbiased);
    save_mean[c] = static_cast<T>(mean);
    save_inv_std[c] = static_cast<T>(inv_std);
  }
}

template <typename T>
void batchnorm_forward_infer_reference(const ExecContext& ctx, const BatchnormShape& sh,
                                       const T* x,             // (N, C, H, W)
                                       const T* gamma,         // (C)
                                       const T* beta,          // (C)
                                       const T* running_mean,  // (C)
                                       const T* running_var,   // (C)
                                       T* y) {                 // (N, C, H, W)
  batchnorm_check_shape("batchnorm inference", sh);
  const int64_t HW = sh.H * sh.W;
  for (int64_t n = 0; n < sh.N; ++n)
    for (int64_t c = 0; c < sh.C; ++c) {
      const double inv_std = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + sh.eps);
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t at = (n * sh.C + c) * HW + i;
        y[at] = static_cast<T>(static_cast<double>(gamma[c]) *
                                   (static_cast<double>(x[at]) - static_cast<double>(running_mean[c])) * inv_std +
                               static_cast<double>(beta[c]));
      }
    }
}

// dx = gamma * inv_std / M * (M dy - sum(dy) - xhat sum(dy xhat)) (Ioffe & Szegedy 2015, sec. 3).
template <typename T>
void batchnorm_backward_reference(const ExecContext& ctx, const BatchnormShape& sh,
                                  const T* x,             // (N, C, H, W)
                                  const T* gamma,         // (C)
                                  const T* save_mean,     // (C)
                                  const T* save_inv_std,  // (C)
                                  const T* dy,            // (N, C, H, W)
                                  T* dx,                  // (N, C, H, W) or null
                                  T* dgamma,              // (C) or null
                                  T* dbeta) {             // (C) or null
  batchnorm_check_shape("batchnorm backward", sh);
  const int64_t HW = sh.H * sh.W, M = sh.N * HW;
  for (int64_t c = 0; c < sh.C; ++c) {
    const double mean = save_mean[c], inv_std = save_inv_std[c];
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    for (int64_t n = 0; n < sh.N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t at = (n * sh.C + c) * HW + i;
        sum_dy += static_cast<double>(dy[at]);
        sum_dy_xhat += static_cast<double>(dy[at]) * (static_cast<double>(x[at]) - mean) * inv_std;
      }
    if (dgamma) dgamma[c] = static_cast<T>(sum_dy_xhat);
    if (dbeta) dbeta[c] = static_cast<T>(sum_dy);
    if (!dx) continue;
    const double scale = static_cast<double>(gamma[c]) * inv_std / static_cast<double>(M);
    for (int64_t n = 0; n < sh.N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t at = (n * sh.C + c) * HW + i;
        const double xhat = (static_cast<double>(x[at]) - mean) * inv_std;
        dx[at] = static_cast<T>(scale * (static_cast<double>(M) * dy[at] - sum_dy - xhat * sum_dy_xhat));
      }
  }
}

#define CNN_INSTANTIATE_BATCHNORM(T)                                                                             \
  template void batchnorm_forward_train_reference<T>(const ExecContext&, const BatchnormShape&, const T*,        \
                                                     const T*, const T*, T*, T*, T*, T*, T*);                    \
  template void batchnorm_forward_infer_reference<T>(const ExecContext&, const BatchnormShape&, const T*,        \
                                                     const T*, const T*, const T*, const T*, T*);                \
  template void batchnorm_backward_reference<T>(const ExecContext&, const BatchnormShape&, const T*, const T*,   \
                                                const T*, const T*, const T*, T*, T*, T*);
CNN_INSTANTIATE_BATCHNORM(float)
CNN_INSTANTIATE_BATCHNORM(double)
#undef CNN_INSTANTIATE_BATCHNORM

CNN_SIMD_CLONES void batchnorm_shifted_sums_plane_cpu(const float* xp, int64_t HW, double shift, double& s,
                                                      double& ss) {
  double ps = 0.0, pss = 0.0;
#pragma omp simd reduction(+ : ps, pss)
  for (int64_t i = 0; i < HW; ++i) {
    const double d = static_cast<double>(xp[i]) - shift;
    ps += d;
    pss += d * d;
  }
  s += ps;
  ss += pss;
}

CNN_SIMD_CLONES void batchnorm_normalize_plane_cpu(const float* xp, float* yp, int64_t HW, float mean, float scale,
                                                   float bias) {
#pragma omp simd
  for (int64_t i = 0; i < HW; ++i) yp[i] = (xp[i] - mean) * scale + bias;
}

CNN_SIMD_CLONES void batchnorm_grad_sums_plane_cpu(const float* g, const float* xp, float mean, int64_t HW,
                                                   double& sum_g, double& sum_g_xc) {
  double s = 0.0, sx = 0.0;
#pragma omp simd reduction(+ : s, sx)
  for (int64_t i = 0; i < HW; ++i) {
    s += g[i];
    sx += static_cast<double>(g[i]) * static_cast<double>(xp[i] - mean);
  }
  sum_g += s;
  sum_g_xc += sx;
}

CNN_SIMD_CLONES void batchnorm_grad_apply_plane_cpu(const float* g, const float* xp, float* dxp, float mean, float a,
                                                    float b, float k, int64_t HW) {
#pragma omp simd  // an alias of g and dx is element for element: each vector is loaded before it is stored
  for (int64_t i = 0; i < HW; ++i) dxp[i] = a * (g[i] - b - (xp[i] - mean) * k);
}

// Channels are independent, so the fast paths give each thread whole channels; within a channel
// the N planes of H*W contiguous values are the vectorised inner loops.
void batchnorm_forward_train_cpu(const BatchnormForwardTrain& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const float *x = a.x.f32(), *gamma = a.gamma, *beta = a.beta;
  float *y = a.y.f32(), *running_mean = a.running_mean, *running_var = a.running_var, *save_mean = a.save_mean,
      *save_inv_std = a.save_inv_std;
  check_training_shape(sh);
  const int64_t N = sh.N, C = sh.C, HW = sh.H * sh.W, M = N * HW;
  const double eps = sh.eps, momentum = sh.momentum;
  const int threads = ctx.threads();
#pragma omp parallel for num_threads(threads) if (N * C * HW >= (int64_t{1} << 14)) schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    // Sums of d = x - x0 and d^2 in one pass; shifting by a sample of the channel keeps
    // sum(d^2) - sum(d)^2/M free of the cancellation that sum(x^2) - sum(x)^2/M suffers.
    const double shift = x[c * HW];
    double s, ss;
    batchnorm_shifted_sums_cpu(x, N, C, HW, c, shift, s, ss);
    const double mean = shift + s / static_cast<double>(M);
    const double var = std::max(0.0, (ss - s * s / static_cast<double>(M)) / static_cast<double>(M));
    const double inv_std = 1.0 / std::sqrt(var + eps);
    const float mean_f = static_cast<float>(mean);
    const float scale = static_cast<float>(static_cast<double>(gamma[c]) * inv_std), bias = beta[c];
    batchnorm_normalize_channel_cpu(x, y, N, C, HW, c, mean_f, scale, bias, [](float*) {});
    batchnorm_update_statistics_cpu(momentum, static_cast<double>(M), mean, var, inv_std, c, running_mean,
                                    running_var, save_mean, save_inv_std, a.mean_offset);
  }
}

void batchnorm_forward_infer_cpu(const BatchnormForwardInfer& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const float *x = a.x.f32(), *gamma = a.gamma, *beta = a.beta, *running_mean = a.running_mean,
      *running_var = a.running_var;
  float* y = a.y.f32();
  batchnorm_check_shape("batchnorm inference", sh);
  const int64_t N = sh.N, C = sh.C, HW = sh.H * sh.W;
  const double eps = sh.eps;
  const int threads = ctx.threads();
#pragma omp parallel for num_threads(threads) if (N * C * HW >= (int64_t{1} << 15)) schedule(static)
  for (int64_t nc = 0; nc < N * C; ++nc) {
    const int64_t c = nc % C;
    const float scale = static_cast<float>(gamma[c] / std::sqrt(static_cast<double>(running_var[c]) + eps));
    const float mean = batchnorm_shift_of(running_mean, a.mean_offset, c), bias = beta[c];
    const float* xp = x + nc * HW;
    float* yp = y + nc * HW;
#pragma omp simd
    for (int64_t i = 0; i < HW; ++i) yp[i] = (xp[i] - mean) * scale + bias;
  }
}

void batchnorm_backward_cpu(const BatchnormBackward& a) {
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  const float *x = a.x.f32(), *gamma = a.gamma, *save_mean = a.save_mean, *save_inv_std = a.save_inv_std,
      *dy = a.dy.f32();
  float *dx = a.dx.f32(), *dgamma = a.dgamma, *dbeta = a.dbeta;
  batchnorm_check_shape("batchnorm backward", sh);
  const int64_t N = sh.N, C = sh.C, HW = sh.H * sh.W, M = N * HW;
  const int threads = ctx.threads();
#pragma omp parallel for num_threads(threads) if (N * C * HW >= (int64_t{1} << 14)) schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    const float mean = save_mean[c];
    const double inv_std = save_inv_std[c];
    double sum_dy = 0.0, sum_dy_xc = 0.0;  // sum(dy), sum(dy * (x - mean))
    for (int64_t n = 0; n < N; ++n)
      batchnorm_grad_sums_plane_cpu(dy + (n * C + c) * HW, x + (n * C + c) * HW, mean, HW, sum_dy, sum_dy_xc);
    const double sum_dy_xhat = sum_dy_xc * inv_std;
    if (dgamma) dgamma[c] = static_cast<float>(sum_dy_xhat);
    if (dbeta) dbeta[c] = static_cast<float>(sum_dy);
    if (!dx) continue;
    // dx = gamma inv_std (dy - sum_dy/M - (x - mean) inv_std sum_dy_xhat / M)
    const float a = static_cast<float>(gamma[c] * inv_std);
    const float b = static_cast<float>(sum_dy / static_cast<double>(M));
    const float k = static_cast<float>(inv_std * sum_dy_xhat / static_cast<double>(M));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t base = (n * C + c) * HW;
      batchnorm_grad_apply_plane_cpu(dy + base, x + base, dx + base, mean, a, b, k, HW);
    }
  }
}

}  // namespace cnn
