// Gradient norm and clipping on the CPU with OpenMP; deterministic chunked reduction. A CUDA
// context goes to clip_cuda.cu.
#include "optim/clip.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace cnn {

namespace {

constexpr int64_t kParallelMinElements = 1 << 15;

int threads_for(const ExecContext& ctx, int64_t n) { return n >= kParallelMinElements ? ctx.threads() : 1; }

void check_buffer(const char* what, const float* p, int64_t n) {
  CNN_CHECK(n >= 0 && (n == 0 || p != nullptr), "{}: bad buffer ({} elements)", what, n);
}

}  // namespace

double global_grad_norm(const ExecContext& ctx, const float* grads, int64_t n) {
  check_buffer("global_grad_norm", grads, n);
  if (ctx.device == Device::cuda) return global_grad_norm_cuda(ctx, grads, n);
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
  if (ctx.device == Device::cuda) {
    check_buffer("clip_grad_norm", grads, n);
    return clip_grad_norm_cuda(ctx, grads, n, max_norm);
  }
  const double norm = global_grad_norm(ctx, grads, n);
  if (!(norm > max_norm) || !std::isfinite(norm)) return norm;
  const float scale = static_cast<float>(max_norm / (norm + 1e-6));
#pragma omp parallel for schedule(static) num_threads(threads_for(ctx, n))
  for (int64_t i = 0; i < n; ++i) grads[i] *= scale;
  return norm;
}

bool all_finite(const ExecContext& ctx, const float* x, int64_t n) {
  check_buffer("all_finite", x, n);
  if (ctx.device == Device::cuda) return all_finite_cuda(ctx, x, n);
  int64_t bad = 0;
#pragma omp parallel for schedule(static) reduction(+ : bad) num_threads(threads_for(ctx, n))
  for (int64_t i = 0; i < n; ++i) bad += std::isfinite(x[i]) ? 0 : 1;
  return bad == 0;
}

}  // namespace cnn
