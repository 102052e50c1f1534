// Test tolerances in one place: |a - b| <= atol + rtol * |b|, b being the reference.
#pragma once

namespace cnn::test {

struct Tolerance {
  double atol;
  double rtol;
};

// Fast CPU path (BLAS, different summation order) against the naive float reference.
inline constexpr Tolerance kFastCpuVsReference{1e-4, 1e-4};
// cpu:winograd (F(4x4, 3x3) from 8x8 outputs up) against the reference: its transforms' rounding
// scales with the sum of |products| over the reduction, not with the output, so an output that
// cancels to near zero carries it (measured: relative L2 0.8e-6 to 2.5e-6 over a whole output,
// single elements up to 3.4e-4 off on sums of up to 73,728 products of values in [-1, 1);
// tests/ops/test_conv2d_winograd_cpu.cpp).
inline constexpr Tolerance kCpuTransformVsReference{1e-3, 1e-4};
// Any GPU kernel (FP32, TF32 off) against the CPU reference.
inline constexpr Tolerance kGpuVsCpu{1e-4, 1e-3};
// FFT and Winograd convolutions (cuDNN's, ours) against the CPU: transform rounding scales with
// sum |x||w| over the reduction rather than with the output (tests/ops/test_cudnn.cpp derives it).
inline constexpr Tolerance kGpuTransformVsCpu{1e-3, 1e-3};
// BF16 outputs (y, dx of the BF16 tensor-core convolution) against a double reference computed on
// the same bf16-rounded inputs: the output is rounded once to bf16, at most half an ulp = 2^-8 of
// the value at the bottom of a binade; the FP32 sum before it adds ~1e-6 relative, covered by atol
// (which also covers sums that cancel to near zero). Truncation instead of rounding fails it.
inline constexpr Tolerance kBf16OutputVsCpu{1e-4, 1.0 / 256};
// F16 outputs against the same reference on the same f16-exact inputs: one rounding to f16 is at
// most half an ulp = 2^-11 of the value at the bottom of a binade (f16 keeps 10 mantissa bits);
// the FP32 sum before it and subnormal results (steps of 2^-24) are covered by the same atol.
inline constexpr Tolerance kF16OutputVsCpu{1e-4, 1.0 / 2048};
// Finite-difference gradient check in double (central differences, step kFdStep).
inline constexpr Tolerance kFiniteDifference{1e-6, 1e-5};
inline constexpr double kFdStep = 1e-6;
// Exact equality, for deterministic replays.
inline constexpr Tolerance kExact{0.0, 0.0};

}  // namespace cnn::test
