// Probe operand values and their relative L2 difference on the host (see probe_operands.h). The
// OpenMP loops below only do arithmetic on memory allocated before them, so nothing can throw
// inside a region.
#include "tune/probe_operands.h"

#include <cstring>
#include <limits>

#include "core/error.h"
#include "ops/convert.h"

namespace cnn {
namespace {

// Below this many values one thread is faster than waking the others.
constexpr int64_t kParallelMin = int64_t(1) << 15;

int threads_for(int threads, int64_t n) {
  if (n < kParallelMin) return 1;
  return threads > 0 ? threads : available_cores();
}

// Values per channel and channels of an (N, C, ...) shape; a flat (n) shape is one channel.
void channel_layout(const Shape& shape, int64_t& inner, int64_t& channels) {
  channels = shape.rank() >= 2 ? shape[1] : 1;
  const int64_t planes = shape.rank() >= 2 ? shape[0] * shape[1] : 1;
  inner = planes > 0 ? std::max<int64_t>(shape.numel() / planes, 1) : 1;
  channels = std::max<int64_t>(channels, 1);
}

void fill_host(float* v, int64_t n, int64_t inner, int64_t channels, const ProbeFill& f, int threads) {
  const int64_t pairs = (n + 1) / 2;
#pragma omp parallel for schedule(static) num_threads(threads_for(threads, n))
  for (int64_t j = 0; j < pairs; ++j) {
    float v0, v1;
    probe_pair(f, uint64_t(j), v0, v1);
    v[2 * j] = probe_finish(f, 2 * j, inner, channels, v0);
    if (2 * j + 1 < n) v[2 * j + 1] = probe_finish(f, 2 * j + 1, inner, channels, v1);
  }
}

}  // namespace

std::vector<float> probe_values(const ProbeFill& f, const Shape& shape, int threads) {
  int64_t inner = 1, channels = 1;
  channel_layout(shape, inner, channels);
  std::vector<float> v(static_cast<size_t>(shape.numel()));
  fill_host(v.data(), shape.numel(), inner, channels, f, threads);
  return v;
}

void fill_probe_normals(float* v, int64_t n, float stddev, uint64_t seed, int threads) {
  ProbeFill f;
  f.seed = seed;
  f.scale = stddev;
  fill_host(v, n, 1, 1, f, threads);
}

void fill_probe_uniforms(float* v, int64_t n, float lo, float hi, uint64_t seed, int threads) {
  ProbeFill f;
  f.seed = seed;
  f.normal = false;
  f.lo = lo;
  f.scale = hi - lo;
  fill_host(v, n, 1, 1, f, threads);
}

std::vector<float> probe_normals(int64_t n, float stddev, uint64_t seed, int threads) {
  std::vector<float> v(static_cast<size_t>(std::max<int64_t>(n, 0)));
  fill_probe_normals(v.data(), int64_t(v.size()), stddev, seed, threads);
  return v;
}

Tensor probe_tensor(const ExecContext& ctx, const Shape& shape, const ProbeFill& f, DType dtype) {
  CNN_CHECK(dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16,
            "probe operands: no values of dtype {}", to_string(dtype));
  CNN_CHECK(f.channel_step == 0.0f || dtype == DType::f32,
            "probe operands: a channel step needs NCHW storage (f32), not {}", to_string(dtype));
  Tensor t = Tensor::empty(shape, ctx.device, "accuracy probe operand", dtype);
  int64_t inner = 1, channels = 1;
  channel_layout(shape, inner, channels);
  if (ctx.device == Device::cuda) {
    probe_fill_cuda(ctx, t.raw(), dtype, t.numel(), inner, channels, f);
    return t;
  }
  if (dtype == DType::f32) {
    fill_host(t.data(), t.numel(), inner, channels, f, ctx.threads());
    return t;
  }
  const std::vector<float> v = probe_values(f, shape, ctx.threads());
  void* out = t.raw();
  const int64_t n = t.numel();
#pragma omp parallel for schedule(static) num_threads(threads_for(ctx.threads(), n))
  for (int64_t i = 0; i < n; ++i) store_from_float(out, dtype, i, v[size_t(i)]);
  return t;
}

L2Sums l2_sums(const float* got, const float* ref, int64_t n, int threads) {
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
  L2Sums s;
  for (int64_t c = 0; c < chunks; ++c) s.diff += diffs[size_t(c)], s.norm += norms[size_t(c)];
  return s;
}

L2Sums l2_sums(const ExecContext& ctx, const Tensor& got, const Tensor& ref) {
  CNN_CHECK(got.numel() == ref.numel() && got.dtype() == DType::f32 && ref.dtype() == DType::f32 &&
                got.device() == ctx.device && ref.device() == ctx.device,
            "probe l2_sums: two f32 tensors of equal size on the context's device expected, got {} {} on {} and {} "
            "{} on {}",
            got.shape().to_string(), to_string(got.dtype()), to_string(got.device()), ref.shape().to_string(),
            to_string(ref.dtype()), to_string(ref.device()));
  if (ctx.device == Device::cuda) return l2_sums_cuda(ctx, got.data(), ref.data(), got.numel());
  return l2_sums(got.data(), ref.data(), got.numel(), ctx.threads());
}

double relative_l2(const L2Sums& s) {
  if (std::isnan(s.diff) || std::isnan(s.norm)) return std::numeric_limits<double>::quiet_NaN();
  if (s.norm == 0) return s.diff == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(s.diff / s.norm);
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& ref, int threads) {
  if (got.size() != ref.size()) return std::numeric_limits<double>::infinity();
  return relative_l2(l2_sums(got.data(), ref.data(), int64_t(got.size()), threads));
}

void probe_poison(const ExecContext& ctx, Tensor& t) {
  CNN_CHECK(t.device() == ctx.device, "probe_poison: a {} tensor in a {} context", to_string(t.device()),
            to_string(ctx.device));
  if (ctx.device == Device::cuda) probe_poison_cuda(ctx, t.raw(), t.bytes());
  else if (t.bytes() > 0) std::memset(t.raw(), 0xFF, t.bytes());
}

Tensor probe_upload(const std::vector<float>& v, const Shape& shape, Device device) {
  Tensor t = Tensor::empty(shape, device, "accuracy probe operand");
  device_memcpy(t.data(), device, v.data(), Device::cpu, v.size() * sizeof(float));
  return t;
}

std::vector<float> probe_download(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  device_memcpy(v.data(), Device::cpu, t.data(), t.device(), v.size() * sizeof(float));
  return v;
}

}  // namespace cnn
