// How an op multiplies FP32 operands (train.precision): fp32, plain FP32 fused multiply-adds (bit
// for bit what every op did before precisions existed), or tf32, where an implementation that
// offers it may round the factors to TF32 (8-bit exponent, 10-bit mantissa, unit roundoff 2^-11)
// and multiply them on tensor cores, still accumulating in FP32.
// Trap: a math mode is a permission, not a promise. Only cuDNN convolutions and cuBLAS dense honour
// tf32; our own CUDA kernels and every CPU implementation stay exact FP32 under it. Tensors stay
// FP32 in both modes (the dtype, core/dtype.h, says how values are stored).
#pragma once

#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace cnn {

enum class MathMode { fp32, tf32 };

inline const char* to_string(MathMode m) { return m == MathMode::tf32 ? "tf32" : "fp32"; }

// "fp32" | "tf32"; anything else throws cnn::Error naming the allowed values.
inline MathMode parse_math_mode(const std::string& s) {
  if (s == "fp32") return MathMode::fp32;
  if (s == "tf32") return MathMode::tf32;
  CNN_THROW("unknown math mode '{}' (expected fp32 or tf32)", s);
}

// A training precision (train.precision, a layer's `precision:`): how activations are stored and
// how products are taken. fp32 and tf32 store f32 (tf32 allows TF32 tensor cores, and stores its
// activations channels-last as f32cl where train.tf32_layout says so: Graph::choose_backends); bf16 and fp16
// store activations and their gradients in bf16 or f16, channels-last (core/tensor.h), with FP32
// master weights, FP32 weight gradients and FP32 sums in every op (their math mode is fp32: the
// bf16/f16 rows say how they multiply). fp16's narrow range is why a train.precision fp16 run
// scales its loss (optim/loss_scaler.h).
enum class Precision { fp32, tf32, bf16, fp16 };

inline const char* to_string(Precision p) {
  switch (p) {
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    default: return "fp32";
  }
}
// "fp32" | "tf32" | "bf16" | "fp16"; anything else throws cnn::Error naming the allowed values.
inline Precision parse_precision(const std::string& s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "tf32") return Precision::tf32;
  if (s == "bf16") return Precision::bf16;
  if (s == "fp16") return Precision::fp16;
  CNN_THROW("unknown precision '{}' (expected fp32, tf32, bf16 or fp16)", s);
}
inline MathMode math_mode(Precision p) { return p == Precision::tf32 ? MathMode::tf32 : MathMode::fp32; }
// The dtype of a layer's activations in precision p.
inline DType storage_dtype(Precision p) {
  return p == Precision::bf16 ? DType::bf16 : p == Precision::fp16 ? DType::f16 : DType::f32;
}

}  // namespace cnn
