// How an op multiplies FP32 operands (train.precision): fp32, plain FP32 fused multiply-adds (bit
// for bit what every op did before precisions existed), or tf32, where an implementation that
// offers it may round the factors to TF32 (8-bit exponent, 10-bit mantissa, unit roundoff 2^-11)
// and multiply them on tensor cores, still accumulating in FP32.
// Trap: a math mode is a permission, not a promise. Only cuDNN convolutions and cuBLAS dense honour
// tf32; our own CUDA kernels and every CPU implementation stay exact FP32 under it. Tensors stay
// FP32 in both modes (the dtype, core/dtype.h, says how values are stored).
#pragma once

#include <string>

#include "core/error.h"

namespace cnn {

enum class MathMode { fp32, tf32 };

inline const char* to_string(MathMode m) { return m == MathMode::tf32 ? "tf32" : "fp32"; }

// "fp32" | "tf32"; anything else throws cnn::Error naming the allowed values.
inline MathMode parse_math_mode(const std::string& s) {
  if (s == "fp32") return MathMode::fp32;
  if (s == "tf32") return MathMode::tf32;
  CNN_THROW("unknown precision '{}' (expected fp32 or tf32)", s);
}

}  // namespace cnn
