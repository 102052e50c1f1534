// The bits a bf16 or f16 tensor stores for f32 values: each rounded once to nearest even with the
// project's own conversions (core/bf16.h, core/fp16.h), for tests that check 16-bit buffers bitwise.
#pragma once

#include <cstdint>
#include <vector>

#include "core/bf16.h"
#include "core/dtype.h"
#include "core/fp16.h"

namespace cnn::test {

// v rounded element by element into t (bf16 or f16; anything else: f16).
inline std::vector<uint16_t> half_bits(const std::vector<float>& v, DType t) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = t == DType::bf16 ? bf16_bits_from_float(v[i]) : f16_bits_from_float(v[i]);
  return out;
}

}  // namespace cnn::test
