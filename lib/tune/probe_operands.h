// The accuracy probes' operand values and their comparison (conv_accuracy.h, layer_accuracy.h and
// the autotuner's timing operands): counter-based values, each a pure function of (seed, index),
// filled by OpenMP threads on the host or by a kernel on the GPU (no host copy, no upload), and a
// relative L2 difference summed in fixed chunks, on the device when the tensors live there. The
// same result with any thread count. The bits are core/rng.h's Philox blocks, drawn by index (not
// Rng's one-value-after-another normals, ~60 ns each). Trap: the GPU's log, sin and cos may differ
// from the host's in the last bit, so a value made on the device can be an ulp away from the host's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/exec_context.h"
#include "core/host_device.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace cnn {

// 64 random bits for counter j of `seed`: two words of core/rng.h's Philox block (seed, the test
// stream, j), the counter-based generator dropout and initialisation use.
CNN_HD uint64_t probe_bits(uint64_t seed, uint64_t j) {
  const Philox4 r = philox4x32(seed, static_cast<uint64_t>(RngStream::test), j);
  return uint64_t{r.v[0]} << 32 | r.v[1];
}

// What a probe tensor (N, C, ...) holds at flat index i: scale * N(0,1) value i of `seed` (normal),
// or lo + scale * a uniform in [0, 1) (not normal); plus channel_step * (c mod 3), c the channel of
// i (a batchnorm input whose channels have large means); then max(0, v) when relu.
struct ProbeFill {
  uint64_t seed = 1;
  bool normal = true;
  float scale = 1.0f, lo = 0.0f;
  float channel_step = 0.0f;
  bool relu = false;
};

// Values 2j and 2j+1 of fill f before the channel step and relu. Normals by Box-Muller (Box &
// Muller 1958) on two 24-bit uniforms of one probe_bits: u1 in (0, 1) so log(u1) is finite
// (|z| <= 5.8), u2 in [0, 1); one log, sqrt, sin and cos for two values. Uniforms: the top 24 bits
// of probe_bits(seed, i), one value each.
CNN_HD void probe_pair(const ProbeFill& f, uint64_t j, float& v0, float& v1) {
  if (!f.normal) {
    v0 = f.lo + f.scale * (static_cast<float>(static_cast<uint32_t>(probe_bits(f.seed, 2 * j) >> 40)) * (1.0f / 16777216.0f));
    v1 = f.lo + f.scale * (static_cast<float>(static_cast<uint32_t>(probe_bits(f.seed, 2 * j + 1) >> 40)) * (1.0f / 16777216.0f));
    return;
  }
  const uint64_t h = probe_bits(f.seed, j);
  const float u1 = (static_cast<float>(static_cast<uint32_t>(h >> 40)) + 0.5f) * (1.0f / 16777216.0f);
  const float u2 = static_cast<float>(static_cast<uint32_t>(h >> 16) & 0xFFFFFFu) * (1.0f / 16777216.0f);
  const float r = sqrtf(-2.0f * logf(u1));
  const float a = 6.2831853071795865f * u2;
  v0 = f.scale * (r * cosf(a));
  v1 = f.scale * (r * sinf(a));
}

// The channel step and relu of f on value v at flat index i, for `inner` values a channel and
// `channels` channels.
CNN_HD float probe_finish(const ProbeFill& f, int64_t i, int64_t inner, int64_t channels, float v) {
  if (f.channel_step != 0.0f) v += f.channel_step * static_cast<float>(i / inner % channels % 3);
  return f.relu ? (v > 0.0f ? v : 0.0f) : v;
}

// The host's values of f for a tensor of `shape` (f32), on `threads` OpenMP threads (<= 0: all
// cores): the same values whatever the thread count.
std::vector<float> probe_values(const ProbeFill& f, const Shape& shape, int threads);
// n values stddev * N(0,1) from `seed`: probe_values of {seed, normal, stddev} as a flat vector.
std::vector<float> probe_normals(int64_t n, float stddev, uint64_t seed, int threads = 0);
// v[i] for i in [0, n): the fills above into memory the caller owns.
void fill_probe_normals(float* v, int64_t n, float stddev, uint64_t seed, int threads);
void fill_probe_uniforms(float* v, int64_t n, float lo, float hi, uint64_t seed, int threads);

// A tensor of `shape` in `dtype` (f32, bf16 or f16: the values rounded once) on ctx's device
// holding f's values; on a GPU made there by a kernel on ctx's stream.
Tensor probe_tensor(const ExecContext& ctx, const Shape& shape, const ProbeFill& f, DType dtype = DType::f32);

// Sums of (got - ref)^2 and ref^2 in double, in chunks of kRelativeL2Chunk values whose sums are
// added in order: the same on any number of threads (<= 0: all cores).
constexpr int64_t kRelativeL2Chunk = int64_t(1) << 15;
struct L2Sums {
  double diff = 0, norm = 0;
};
L2Sums l2_sums(const float* got, const float* ref, int64_t n, int threads);
// The same over two f32 tensors of equal size on ctx's device, summed on the device on a GPU
// (the same chunks; the order within a chunk differs from the host's, so the sums agree to rounding).
L2Sums l2_sums(const ExecContext& ctx, const Tensor& got, const Tensor& ref);
// ||got - ref|| / ||ref|| from the sums: 0 when both are zero, infinity when only ref is, NaN when
// a sum is NaN.
double relative_l2(const L2Sums& s);
// relative_l2 of two host vectors (infinity when their sizes differ; NaN in got gives NaN).
double relative_l2(const std::vector<float>& got, const std::vector<float>& ref, int threads = 0);

// Fills t (any dtype) with all-ones bits, a NaN as f32 and as bf16 or f16: an output no algorithm
// wrote reads as NaN. On a GPU a memset on ctx's stream.
void probe_poison(const ExecContext& ctx, Tensor& t);

// A tensor of `shape` on `device` holding v (f32); a host copy of an f32 tensor.
Tensor probe_upload(const std::vector<float>& v, const Shape& shape, Device device);
std::vector<float> probe_download(const Tensor& t);

// The kernels behind probe_tensor and l2_sums on a GPU (probe_operands_cuda.cu): `out` (n) in
// dtype with channels and inner of its (N, C, ...) shape; l2 partial sums of each chunk, added here.
void probe_fill_cuda(const ExecContext& ctx, void* out, DType dtype, int64_t n, int64_t inner, int64_t channels,
                     const ProbeFill& f);
L2Sums l2_sums_cuda(const ExecContext& ctx, const float* got, const float* ref, int64_t n);
void probe_poison_cuda(const ExecContext& ctx, void* p, size_t bytes);

}  // namespace cnn
