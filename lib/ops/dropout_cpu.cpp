// Inverted dropout on the CPU. Element i is dropped when philox_uniform(seed, dropout, offset + i) < p.
// The reference draws one Philox block per element; the fast path draws each 4-lane block once.
// The bf16 rows (the CPU emulation, ops/dispatch.h) widen, mask in f32 and round once; the mask is
// indexed by the storage index (the contract), so there is no permute.
// Trap: blocks are aligned to the counter offset + i, not to i, so an offset that is not a
// multiple of 4 starts mid-block; backward is the same masking applied to dy.
#include <algorithm>

#include "core/error.h"
#include "core/rng.h"
#include "ops/convert.h"
#include "ops/dropout.h"

namespace cnn {

static constexpr uint64_t kDropoutStream = static_cast<uint64_t>(RngStream::dropout);

static void check_params(const char* what, const DropoutParams& prm, int64_t n) {
  if (!(prm.p >= 0.0f && prm.p < 1.0f)) CNN_THROW("dropout {}: p must be in [0, 1), got {}", what, prm.p);
  if (n < 0) CNN_THROW("dropout {}: element count must be non-negative, got {}", what, n);
  if (prm.device_seed_step) CNN_THROW("dropout {}: the CPU cannot read seed and step from GPU memory", what);
}

bool dropout_keep(const DropoutParams& prm, int64_t i) {
  return !(philox_uniform(prm.seed, kDropoutStream, prm.offset + static_cast<uint64_t>(i)) < prm.p);
}

// out = keep ? in / (1 - p) : 0, one element at a time.
template <typename T>
static void mask_reference(const DropoutParams& prm, int64_t n, const T* in, T* out) {
  const T scale = T(1) / (T(1) - static_cast<T>(prm.p));
  for (int64_t i = 0; i < n; ++i) out[i] = dropout_keep(prm, i) ? in[i] * scale : T(0);
}

template <typename T>
void dropout_forward_reference(const ExecContext& ctx, const DropoutParams& prm, int64_t n,
                               const T* x,  // (n)
                               T* y) {      // (n)
  check_params("forward", prm, n);
  mask_reference(prm, n, x, y);
}

template <typename T>
void dropout_backward_reference(const ExecContext& ctx, const DropoutParams& prm, int64_t n,
                                const T* dy,  // (n)
                                T* dx) {      // (n)
  check_params("backward", prm, n);
  mask_reference(prm, n, dy, dx);
}

template void dropout_forward_reference<float>(const ExecContext&, const DropoutParams&, int64_t, const float*,
                                               float*);
template void dropout_forward_reference<double>(const ExecContext&, const DropoutParams&, int64_t, const double*,
                                                double*);
template void dropout_backward_reference<float>(const ExecContext&, const DropoutParams&, int64_t, const float*,
                                                float*);
template void dropout_backward_reference<double>(const ExecContext&, const DropoutParams&, int64_t, const double*,
                                                 double*);

// Elements [0, n) are counters [offset, offset + n); counter c lives in Philox block c / 4, lane c % 4.
static void mask_cpu(const ExecContext& ctx, const DropoutParams& prm, int64_t n, const float* in, float* out) {
  if (n == 0) return;
  const float p = prm.p;
  const float scale = 1.0f / (1.0f - p);
  if (p == 0.0f) {  // nothing is dropped (u < 0 never holds) and the scale is 1
    if (in != out) std::copy(in, in + n, out);
    return;
  }
  const uint64_t first = prm.offset, last = prm.offset + static_cast<uint64_t>(n);  // counters [first, last)
  const int64_t block_begin = static_cast<int64_t>(first >> 2);
  const int64_t blocks = static_cast<int64_t>(((last - 1) >> 2) - (first >> 2) + 1);
  const uint64_t seed = prm.seed;
  const int threads = ctx.threads();
#pragma omp parallel for num_threads(threads) if (n >= (int64_t{1} << 14)) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const uint64_t block = static_cast<uint64_t>(block_begin + b);
    const Philox4 r = philox4x32(seed, kDropoutStream, block);
    for (uint64_t lane = 0; lane < 4; ++lane) {
      const uint64_t counter = block * 4 + lane;
      if (counter < first || counter >= last) continue;
      const int64_t i = static_cast<int64_t>(counter - first);
      out[i] = uint_to_unit_float(r.v[lane]) < p ? 0.0f : in[i] * scale;
    }
  }
}

void dropout_forward_cpu(const DropoutForward& a) {
  check_params("forward", a.prm, a.n);
  mask_cpu(*a.ctx, a.prm, a.n, a.x.f32(), a.y.f32());
}

void dropout_backward_cpu(const DropoutBackward& a) {
  check_params("backward", a.prm, a.n);
  mask_cpu(*a.ctx, a.prm, a.n, a.dy.f32(), a.dx.f32());
}

// in (n, bf16 or f16) -> out (n, the same), which may alias it.
static void mask_cpu_16(const ExecContext& ctx, const DropoutParams& prm, int64_t n, ConstView in, View out) {
  const ActDims flat{n, 1};
  std::vector<float> v = widen(in, flat);
  mask_cpu(ctx, prm, n, v.data(), v.data());
  narrow(v.data(), flat, out);
}

void dropout_forward_cpu_bf16(const DropoutForward& a) {
  check_params("forward", a.prm, a.n);
  mask_cpu_16(*a.ctx, a.prm, a.n, a.x, a.y);
}

void dropout_backward_cpu_bf16(const DropoutBackward& a) {
  check_params("backward", a.prm, a.n);
  mask_cpu_16(*a.ctx, a.prm, a.n, a.dy, a.dx);
}

}  // namespace cnn
