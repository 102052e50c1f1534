// Per-channel loops shared by the CPU batchnorm paths (batchnorm_cpu.cpp, batchnorm_phased_cpu.cpp):
// the shifted one-pass sums, the normalisation of a channel's N planes, and the statistics update.
// Trap: the sums are in double about a shift near the mean; sum(x^2) - sum(x)^2/M loses the variance.
#pragma once

#include <cstdint>

#include "ops/batchnorm.h"

namespace cnn {

// The plane loops below, built per x86-64 level (ops/simd_clones.h), in batchnorm_cpu.cpp.
// One plane xp (HW): s += sum of d, ss += sum of d^2, d = x - shift.
void batchnorm_shifted_sums_plane_cpu(const float* xp, int64_t HW, double shift, double& s, double& ss);
// One plane: yp (HW) = (xp - mean) * scale + bias.
void batchnorm_normalize_plane_cpu(const float* xp, float* yp, int64_t HW, float mean, float scale, float bias);
// One plane: sum_g += sum of g (HW), sum_g_xc += sum of g (x - mean), in double.
void batchnorm_grad_sums_plane_cpu(const float* g, const float* xp, float mean, int64_t HW, double& sum_g,
                                   double& sum_g_xc);
// One plane: dx (HW) = a (g - b - (x - mean) k); g may alias dx (each element read before written).
void batchnorm_grad_apply_plane_cpu(const float* g, const float* xp, float* dxp, float mean, float a, float b,
                                    float k, int64_t HW);

// Channel c of x (N, C, HW): s = sum of d, ss = sum of d^2, d = x - shift.
inline void batchnorm_shifted_sums_cpu(const float* x, int64_t N, int64_t C, int64_t HW, int64_t c, double shift,
                                       double& sum, double& sum_sq) {
  double s = 0.0, ss = 0.0;
  for (int64_t n = 0; n < N; ++n) batchnorm_shifted_sums_plane_cpu(x + (n * C + c) * HW, HW, shift, s, ss);
  sum = s;
  sum_sq = ss;
}

// Channel c: y = (x - mean) * scale + bias, then plane(yp) on each of its N planes of HW values.
template <typename Plane>
inline void batchnorm_normalize_channel_cpu(const float* x, float* y, int64_t N, int64_t C, int64_t HW, int64_t c,
                                            float mean, float scale, float bias, Plane&& plane) {
  for (int64_t n = 0; n < N; ++n) {
    float* yp = y + (n * C + c) * HW;
    batchnorm_normalize_plane_cpu(x + (n * C + c) * HW, yp, HW, mean, scale, bias);
    plane(yp);
  }
}

// Channel c's running statistics (unbiased variance over the count M) and saved statistics; the
// running mean takes mean + mean_offset[c] (batchnorm.h's "Mean offset"; null: none).
inline void batchnorm_update_statistics_cpu(double momentum, double M, double mean, double var, double inv_std,
                                            int64_t c, float* running_mean, float* running_var, float* save_mean,
                                            float* save_inv_std, const float* mean_offset) {
  const double unbiased = var * M / (M - 1.0);
  running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] +
                                       momentum * batchnorm_running_input(mean, mean_offset, c));
  running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
  save_mean[c] = static_cast<float>(mean);
  save_inv_std[c] = static_cast<float>(inv_std);
}

}  // namespace cnn
