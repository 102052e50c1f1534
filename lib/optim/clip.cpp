// Gradient norm and clipping on the CPU with OpenMP; deterministic chunked reduction.
#include "optim/clip.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace cnn {

namespace {

constexpr int64_t kParallelMinElements = 1 << 15;

int threads_for(const ExecContext& ctx, int64_t n) { return n >= kParallelMinElements ? ctx.threads() : 1; }

void check_cpu(const ExecContext& ctx, const char* what) {
  if (ctx.device != Device::cpu) {
    CNN_THROW("{}: runs on the CPU only; got a {} context", what, to_string(ctx.device));
  }
}

}  // namespace

double global_grad_norm(const ExecContext& ctx, const float* grads, int64_t n) {
  check_cpu(ctx, "global_grad_norm");
  CNN_CHECK(n >= 0 && (n == 0 || grads != nullptr), "global_grad_norm: bad buffer ({} elements)", n);
  const int64_t chunks = (n + kGradNormChunk - 1) / kGradNormChunk;
  std::vector<double> partial(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) num_threads(threads_for(ctx, n))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kGradNormChunk;
    const int64_t end = begin + kGradNormChunk < n ? begin + kGradNormChunk : n;
    double sum = 0.0;
    for (int64_t i = begin; i < end; ++i) {
      const double g = grads[i];
      sum += g * g;
    }
    partial[static_cast<size_t>(c)] = sum;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return std::sqrt(total);
}

double clip_grad_norm(const ExecContext& ctx, float* grads, int64_t n, double max_norm) {
  CNN_CHECK(max_norm > 0.0, "clip_grad_norm: max_norm must be > 0, got {}", max_norm);
  const double norm = global_grad_norm(ctx, grads, n);
  if (!(norm > max_norm) || !std::isfinite(norm)) return norm;
  const float scale = static_cast<float>(max_norm / (norm + 1e-6));
#pragma omp parallel for schedule(static) num_threads(threads_for(ctx, n))
  for (int64_t i = 0; i < n; ++i) grads[i] *= scale;
  return norm;
}

bool all_finite(const ExecContext& ctx, const float* x, int64_t n) {
  check_cpu(ctx, "all_finite");
  CNN_CHECK(n >= 0 && (n == 0 || x != nullptr), "all_finite: bad buffer ({} elements)", n);
  int64_t bad = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad) num_threads(threads_for(ctx, n))
  for (int64_t i = 0; i < n; ++i) bad += std::isfinite(x[i]) ? 0 : 1;
  return bad == 0;
}

}  // namespace cnn
