// The accuracy probes' operand values and their comparison (conv_accuracy.h, layer_accuracy.h and
// the autotuner's timing operands): counter-based values, each a pure function of (seed, index),
// filled by OpenMP threads, and a relative L2 difference summed in fixed chunks. Both give the same
// result with any thread count. Trap: the values are not core/rng.h's streams (Philox, one value
// after another, ~60 ns a normal): a probe seeded alike still differs from a pre-2026 probe's numbers.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/device.h"
#include "core/host_device.h"
#include "core/tensor.h"

namespace cnn {

// splitmix64's output function (Steele, Lea & Flood, OOPSLA 2014): a bijective 64-bit mix.
CNN_HD uint64_t probe_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// 64 random bits for counter j of `seed`: splitmix64's j-th output from a state made of the seed.
CNN_HD uint64_t probe_bits(uint64_t seed, uint64_t j) {
  return probe_mix64(probe_mix64(seed ^ 0x6A09E667F3BCC909ull) + (j + 1) * 0x9E3779B97F4A7C15ull);
}

// The pair of N(0,1) values at pair index j of `seed` (values 2j and 2j+1), by Box-Muller
// (Box & Muller 1958) on two 24-bit uniforms of one probe_bits: u1 in (0, 1) so log(u1) is finite
// (|z| <= 5.8), u2 in [0, 1). One log, sqrt, sin and cos for two values.
CNN_HD void probe_normal_pair(uint64_t seed, uint64_t j, float& z0, float& z1) {
  const uint64_t h = probe_bits(seed, j);
  const float u1 = (static_cast<float>(static_cast<uint32_t>(h >> 40)) + 0.5f) * (1.0f / 16777216.0f);
  const float u2 = static_cast<float>(static_cast<uint32_t>(h >> 16) & 0xFFFFFFu) * (1.0f / 16777216.0f);
  const float r = std::sqrt(-2.0f * std::log(u1));
  const float a = 6.2831853071795865f * u2;
  z0 = r * std::cos(a);
  z1 = r * std::sin(a);
}

// v[i] = stddev * N(0,1) value i of `seed`, i in [0, n), on `threads` OpenMP threads (<= 0: all
// cores). The same values whatever the thread count.
void fill_probe_normals(float* v, int64_t n, float stddev, uint64_t seed, int threads);
// v[i] uniform in [lo, hi), value i of `seed` (24 random bits each).
void fill_probe_uniforms(float* v, int64_t n, float lo, float hi, uint64_t seed, int threads);
// n values stddev * N(0,1) from `seed` (fill_probe_normals).
std::vector<float> probe_normals(int64_t n, float stddev, uint64_t seed, int threads = 0);

// ||got - ref|| / ||ref|| (0 when both are zero, infinity when only ref is, or the sizes differ;
// NaN in got gives NaN). In double, summed in chunks of kRelativeL2Chunk values, the chunks' sums
// added in order: the same result on any number of threads (<= 0: all cores).
constexpr int64_t kRelativeL2Chunk = int64_t(1) << 15;
double relative_l2(const float* got, const float* ref, int64_t n, int threads);
double relative_l2(const std::vector<float>& got, const std::vector<float>& ref, int threads = 0);

// A tensor of `shape` on `device` holding v (f32); a host copy of an f32 tensor.
Tensor probe_upload(const std::vector<float>& v, const Shape& shape, Device device);
std::vector<float> probe_download(const Tensor& t);

}  // namespace cnn
