// Element-wise sum of several tensors on the CPU. The fast path works in cache-sized chunks,
// adding the inputs one after another in the same order as the reference (bitwise equal).
// The bf16 rows, which are the f16 rows too (the CPU emulation, ops/dispatch.h), widen, run the f32 row and round y once (the
// gradients are copies, exact); element-wise, so the storage order needs no permute.
// Trap: y may alias an input, and a dx may alias dy; both paths are written to allow that.
#include <algorithm>

#include "core/error.h"
#include "ops/add.h"
#include "ops/convert.h"

namespace cnn {

// 4096 floats per input stay in L1 while they are summed.
static constexpr int64_t kChunk = 4096;

static void check_args(const char* what, int64_t n, int count) {
  if (n < 0) CNN_THROW("add {}: element count must be non-negative, got {}", what, n);
  if (count < 1) CNN_THROW("add {}: needs at least one input, got {}", what, count);
}

template <typename T>
void add_forward_reference(const ExecContext& ctx, int64_t n, int count,
                           const T* const* xs,  // count x (n)
                           T* y) {              // (n)
  check_args("forward", n, count);
  for (int64_t i = 0; i < n; ++i) {
    T sum = xs[0][i];
    for (int k = 1; k < count; ++k) sum += xs[k][i];
    y[i] = sum;
  }
}

template <typename T>
void add_backward_reference(const ExecContext& ctx, int64_t n, int count,
                            const T* dy,      // (n)
                            T* const* dxs) {  // count x (n), entries may be null
  check_args("backward", n, count);
  for (int k = 0; k < count; ++k) {
    if (!dxs[k]) continue;
    for (int64_t i = 0; i < n; ++i) dxs[k][i] = dy[i];
  }
}

template void add_forward_reference<float>(const ExecContext&, int64_t, int, const float* const*, float*);
template void add_forward_reference<double>(const ExecContext&, int64_t, int, const double* const*, double*);
template void add_backward_reference<float>(const ExecContext&, int64_t, int, const float*, float* const*);
template void add_backward_reference<double>(const ExecContext&, int64_t, int, const double*, double* const*);

void add_forward_cpu(const AddForward& a) {
  const int64_t n = a.n;
  const int count = a.count;
  check_args("forward", n, count);
  const std::vector<const float*> xs = f32_pointers(a.xs, size_t(count));
  float* y = a.y.f32();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = a.ctx->threads();
#pragma omp parallel for num_threads(threads) if (n * count >= (int64_t{1} << 15)) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t begin = ch * kChunk, len = std::min(kChunk, n - begin);
    float* yc = y + begin;
    const float* x0 = xs[0] + begin;
    if (count == 1) {
      if (yc != x0) std::copy(x0, x0 + len, yc);
      continue;
    }
    // Summed in a local buffer, so y may alias any input (each is read before y is written).
    float acc[kChunk];
    const float* x1 = xs[1] + begin;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) acc[i] = x0[i] + x1[i];
    for (int k = 2; k < count; ++k) {
      const float* xk = xs[k] + begin;
#pragma omp simd
      for (int64_t i = 0; i < len; ++i) acc[i] += xk[i];
    }
    std::copy(acc, acc + len, yc);
  }
}

void add_backward_cpu(const AddBackward& a) {
  const int64_t n = a.n;
  const int count = a.count;
  check_args("backward", n, count);
  const float* dy = a.dy.f32();
  const std::vector<float*> dxs = f32_pointers(a.dxs, size_t(count));
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads = a.ctx->threads();
#pragma omp parallel for num_threads(threads) if (n * count >= (int64_t{1} << 16)) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t begin = ch * kChunk, len = std::min(kChunk, n - begin);
    for (int k = 0; k < count; ++k)
      if (dxs[k] && dxs[k] != dy) std::copy(dy + begin, dy + begin + len, dxs[k] + begin);
  }
}

void add_forward_cpu_bf16(const AddForward& a) {
  check_args("forward", a.n, a.count);
  const ActDims flat{a.n, 1};
  std::vector<std::vector<float>> xs;
  for (int k = 0; k < a.count; ++k) xs.push_back(widen(a.xs[k], flat));
  std::vector<ConstView> views;
  for (const auto& x : xs) views.emplace_back(x.data());
  std::vector<float> y(size_t(a.n));
  add_forward_cpu(AddForward{a.ctx, a.n, a.count, views.data(), y.data()});
  narrow(y.data(), flat, a.y);
}

void add_backward_cpu_bf16(const AddBackward& a) {
  check_args("backward", a.n, a.count);
  const ActDims flat{a.n, 1};
  const std::vector<float> dy = widen(a.dy, flat);
  std::vector<std::vector<float>> dxs(size_t(a.count));
  std::vector<View> views;
  for (int k = 0; k < a.count; ++k) {
    if (!a.dxs[k].null()) dxs[size_t(k)].resize(size_t(a.n));
    views.emplace_back(a.dxs[k].null() ? nullptr : dxs[size_t(k)].data());
  }
  add_backward_cpu(AddBackward{a.ctx, a.n, a.count, dy.data(), views.data()});
  for (int k = 0; k < a.count; ++k)
    if (!a.dxs[k].null()) narrow(dxs[size_t(k)].data(), flat, a.dxs[k]);
}

}  // namespace cnn
