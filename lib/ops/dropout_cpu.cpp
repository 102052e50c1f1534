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
#include "ops/simd_clones.h"

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

// out[i] for the counters of Philox block `block` that lie in [first, last): the scalar path of
// the partial blocks at either end.
static void mask_block(uint64_t seed, uint64_t block, uint64_t first, uint64_t last, float p, float scale,
                       const float* in, float* out) {
  const Philox4 r = philox4x32(seed, kDropoutStream, block);
  for (uint64_t lane = 0; lane < 4; ++lane) {
    const uint64_t counter = block * 4 + lane;
    if (counter < first || counter >= last) continue;
    const int64_t i = static_cast<int64_t>(counter - first);
    out[i] = uint_to_unit_float(r.v[lane]) < p ? 0.0f : in[i] * scale;
  }
}

constexpr int64_t kGroup = 16;  // Philox blocks computed side by side, one per vector lane

// The 4 * kGroup elements of blocks [block0, block0 + kGroup), all inside [first, last): philox4x32
// (core/rng.h) written over kGroup counters at once so the 32x32->64-bit products vectorise; the
// same bits, so the same mask as the reference.
CNN_SIMD_CLONES static void mask_group(
    uint64_t seed, uint64_t block0, float p, float scale, const float* in, float* out) {
  uint32_t c0[kGroup], c1[kGroup], c2[kGroup], c3[kGroup];
  for (int64_t l = 0; l < kGroup; ++l) {
    const uint64_t block = block0 + uint64_t(l);
    c0[l] = static_cast<uint32_t>(block), c1[l] = static_cast<uint32_t>(block >> 32);
    c2[l] = static_cast<uint32_t>(kDropoutStream), c3[l] = static_cast<uint32_t>(kDropoutStream >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int64_t l = 0; l < kGroup; ++l) philox_round(c0[l], c1[l], c2[l], c3[l], k0, k1);
    philox_next_key(k0, k1);
  }
  uint32_t bits[4 * kGroup];  // in counter order
  for (int64_t l = 0; l < kGroup; ++l)
    bits[4 * l] = c0[l], bits[4 * l + 1] = c1[l], bits[4 * l + 2] = c2[l], bits[4 * l + 3] = c3[l];
#pragma omp simd
  for (int64_t i = 0; i < 4 * kGroup; ++i) {
    const float kept = in[i] * scale;
    out[i] = uint_to_unit_float(bits[i]) < p ? 0.0f : kept;
  }
}

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
  // Whole blocks [full_begin, full_end) go by groups of kGroup; the partial ends and the last
  // blocks short of a group go one by one.
  const uint64_t full_begin = (first + 3) >> 2, full_end = std::max(full_begin, last >> 2);
  const int64_t groups = static_cast<int64_t>((full_end - full_begin) / kGroup);
  const uint64_t grouped_end = full_begin + uint64_t(groups * kGroup);
  const uint64_t seed = prm.seed;
  const int threads = ctx.threads();
#pragma omp parallel num_threads(threads) if (n >= (int64_t{1} << 14))
  {
#pragma omp for schedule(static) nowait
    for (int64_t g = 0; g < groups; ++g) {
      const uint64_t block0 = full_begin + uint64_t(g * kGroup);
      const int64_t i0 = static_cast<int64_t>(block0 * 4 - first);
      mask_group(seed, block0, p, scale, in + i0, out + i0);
    }
#pragma omp single nowait
    {
      for (uint64_t b = first >> 2; b < full_begin; ++b) mask_block(seed, b, first, last, p, scale, in, out);
      for (uint64_t b = std::max(grouped_end, first >> 2); b <= (last - 1) >> 2; ++b)
        mask_block(seed, b, first, last, p, scale, in, out);
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
