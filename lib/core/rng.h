// Counter-based random numbers (Philox4x32-10, Salmon et al., SC 2011): the value at
// (seed, stream, counter) is a pure function, so CPU and CUDA draw identical numbers and a run
// resumes exactly by restoring (seed, counter). Trap: never reuse a (seed, stream) pair for two
// purposes; give each consumer (init, dropout, shuffle, augment) its own stream id.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace cnn {

struct Philox4 {
  uint32_t v[4];
};

// One Philox round on the counter (c0, c1, c2, c3) under the round's key (k0, k1); the key then
// advances by the Weyl constants (philox_next_key). Shared with the CPU dropout's vectorised copy.
CNN_HD void philox_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
  const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
  const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0, n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
  c0 = n0;
  c1 = static_cast<uint32_t>(p1);
  c2 = n2;
  c3 = static_cast<uint32_t>(p0);
}
CNN_HD void philox_next_key(uint32_t& k0, uint32_t& k1) {
  k0 += 0x9E3779B9u;
  k1 += 0xBB67AE85u;
}

CNN_HD Philox4 philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    philox_round(c0, c1, c2, c3, k0, k1);
    philox_next_key(k0, k1);
  }
  return Philox4{{c0, c1, c2, c3}};
}

// Uniform in [0, 1) from 24 random bits (exactly representable in float).
CNN_HD float uint_to_unit_float(uint32_t x) { return static_cast<float>(x >> 8) * (1.0f / 16777216.0f); }

// Stateless draws: the i-th uniform of (seed, stream).
CNN_HD float philox_uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  Philox4 r = philox4x32(seed, stream, i >> 2);
  return uint_to_unit_float(r.v[i & 3]);
}

// Host-side sequential generator over the same stream; its whole state is (seed, stream, counter).
// One Philox block gives four draws: the block of the current counter is kept (derived from the
// state, never saved), so a run of draws computes a block every fourth draw, not every draw.
class Rng {
public:
  Rng(uint64_t seed = 0, uint64_t stream = 0, uint64_t counter = 0)
      : m_seed(seed), m_stream(stream), m_counter(counter) {}
  uint32_t next_u32() {
    const uint64_t block = m_counter >> 2;
    if (block != m_block_index) {
      m_block = philox4x32(m_seed, m_stream, block);
      m_block_index = block;
    }
    return m_block.v[m_counter++ & 3];
  }
  uint64_t next_u64() {  // the high word is drawn first (two statements: the order is defined)
    const uint64_t hi = next_u32();
    return (hi << 32) | next_u32();
  }
  float uniform() { return uint_to_unit_float(next_u32()); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }
  // Standard normal by Box-Muller (uses two uniforms; u1 kept away from 0).
  float normal() {
    float u1 = (static_cast<float>(next_u32() >> 8) + 1.0f) * (1.0f / 16777217.0f);
    float u2 = uniform();
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853071795865f * u2);
  }
  // Uniform integer in [0, n), n > 0, without modulo bias (Lemire's multiply-shift with rejection).
  uint64_t below(uint64_t n) {
    for (;;) {
      uint64_t x = next_u64();
      unsigned __int128 m = static_cast<unsigned __int128>(x) * n;
      uint64_t lo = static_cast<uint64_t>(m);
      if (lo >= n || lo >= (0 - n) % n) return static_cast<uint64_t>(m >> 64);
    }
  }
  uint64_t seed() const { return m_seed; }
  uint64_t stream() const { return m_stream; }
  uint64_t counter() const { return m_counter; }

private:
  uint64_t m_seed, m_stream, m_counter;
  // philox4x32(m_seed, m_stream, m_block_index); the index starts at one no counter reaches
  // (counter >> 2 < 2^62), so the first draw computes its block.
  Philox4 m_block{};
  uint64_t m_block_index = ~uint64_t{0};
};

// Stream ids, one per consumer of randomness.
enum class RngStream : uint64_t { init = 1, dropout = 2, shuffle = 3, augment = 4, split = 5, test = 99 };

}  // namespace cnn
