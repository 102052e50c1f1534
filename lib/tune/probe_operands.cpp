// Probe operand values and their relative L2 difference (see probe_operands.h). The loops below
// only do arithmetic on memory allocated before them, so nothing can throw inside a region.
#include "tune/probe_operands.h"

#include <algorithm>
#include <limits>

#include "core/exec_context.h"

namespace cnn {
namespace {

// Below this many values one thread is faster than waking the others.
constexpr int64_t kParallelMin = int64_t(1) << 15;

int threads_for(int threads, int64_t n) {
  if (n < kParallelMin) return 1;
  return threads > 0 ? threads : available_cores();
}

}  // namespace

void fill_probe_normals(float* v, int64_t n, float stddev, uint64_t seed, int threads) {
  const int64_t pairs = (n + 1) / 2;
#pragma omp parallel for schedule(static) num_threads(threads_for(threads, n))
  for (int64_t j = 0; j < pairs; ++j) {
    float z0, z1;
    probe_normal_pair(seed, uint64_t(j), z0, z1);
    v[2 * j] = stddev * z0;
    if (2 * j + 1 < n) v[2 * j + 1] = stddev * z1;
  }
}

void fill_probe_uniforms(float* v, int64_t n, float lo, float hi, uint64_t seed, int threads) {
  const float scale = (hi - lo) * (1.0f / 16777216.0f);
#pragma omp parallel for schedule(static) num_threads(threads_for(threads, n))
  for (int64_t i = 0; i < n; ++i) v[i] = lo + scale * float(uint32_t(probe_bits(seed, uint64_t(i)) >> 40));
}

std::vector<float> probe_normals(int64_t n, float stddev, uint64_t seed, int threads) {
  std::vector<float> v(size_t(std::max<int64_t>(n, 0)));
  fill_probe_normals(v.data(), int64_t(v.size()), stddev, seed, threads);
  return v;
}

double relative_l2(const float* got, const float* ref, int64_t n, int threads) {
  const int64_t chunks = (n + kRelativeL2Chunk - 1) / kRelativeL2Chunk;
  std::vector<double> diffs(static_cast<size_t>(chunks)), norms(static_cast<size_t>(chunks));
#pragma omp parallel for schedule(static) num_threads(threads_for(threads, n))
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kRelativeL2Chunk);
    double diff = 0, norm = 0;
    for (int64_t i = c * kRelativeL2Chunk; i < end; ++i) {
      const double d = double(got[i]) - double(ref[i]);
      diff += d * d;
      norm += double(ref[i]) * double(ref[i]);
    }
    diffs[size_t(c)] = diff;
    norms[size_t(c)] = norm;
  }
  double diff = 0, norm = 0;
  for (int64_t c = 0; c < chunks; ++c) diff += diffs[size_t(c)], norm += norms[size_t(c)];
  if (std::isnan(diff)) return std::numeric_limits<double>::quiet_NaN();
  if (norm == 0) return diff == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(diff / norm);
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& ref, int threads) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  return relative_l2(got.data(), ref.data(), int64_t(got.size()), threads);
}

Tensor probe_upload(const std::vector<float>& v, const Shape& shape, Device device) {
  Tensor t = Tensor::empty(shape, device, "accuracy probe operand");
  device_memcpy(t.data(), device, v.data(), Device::cpu, v.size() * sizeof(float));
  return t;
}

std::vector<float> probe_download(const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  device_memcpy(v.data(), Device::cpu, t.data(), t.device(), v.size() * sizeof(float));
  return v;
}

}  // namespace cnn
