// The accuracy guard's tolerances, in one place: the largest relative L2 difference (over every
// output of the op on the probe operands, conv_accuracy.h and layer_accuracy.h) an implementation
// may have from our trusted reference to be used. `--autotune-tolerance` (train.autotune.tolerance),
// when given, replaces every one of them. Each says why it has its size.
#pragma once

#include <string>

#include "core/dtype.h"
#include "core/math_mode.h"

namespace cnn {

// Convolutions, against a plain FP32 direct or GEMM algorithm (cuda:implicit_gemm on a GPU). Plain
// FP32 algorithms (direct sums, implicit or explicit GEMM) differ from one another by about 1e-6
// on the probe operands; FFT and Winograd transforms lose digits that grow with the filter size
// (cuDNN's winograd_nonfused was 0.5-7% off on 5x5 filters, and a fer_cnn step tuned without a
// guard was 5e-3 from a float64 reference against PyTorch's 6e-4). 1e-4 leaves two orders of
// magnitude for summation order on long reductions and still rejects a transform that loses three
// or more digits.
inline constexpr double kConvAccuracyTolerance = 1e-4;

// TF32 convolutions and GEMMs (cuDNN algorithms and cuBLAS under train.precision tf32), against the
// same plain FP32 reference. TF32 keeps 10 of FP32's 23 mantissa bits: rounding a factor to TF32
// costs up to u = 2^-11 (4.9e-4) of its value (2^-10 where the conversion truncates); products
// and sums stay FP32. Independent rounding errors in the two factors of every product leave an
// output about sqrt(2/3) u = 4e-4 (RMS, relative L2 over the outputs; 8e-4 truncating) off when
// its terms do not cancel, and more by the cancellation ratio ||sum |a b||| / ||sum a b|| when
// they do: the probe's set 1 makes dw a small difference of large sums (conv_accuracy.h), about
// one digit of such loss. 5e-3 leaves that and a factor of ~1.5 above the truncating figure; it
// still rejects an algorithm that loses as much as FFT or Winograd transforms do on 5x5 filters
// (0.5-7%, see kConvAccuracyTolerance). To be checked against the probe's measured TF32 errors on
// a GPU (the rel_err column of `cnn-bench conv --precision tf32`).
inline constexpr double kTf32AccuracyTolerance = 5e-3;

// BF16 convolutions (the bf16 rows of a layer under train.precision bf16), against the plain FP32
// reference run on the same bf16 activations (conv_accuracy.h: the probe's x and dy are rounded to
// bf16 values, which both read; w and b are the FP32 masters). BF16 keeps 8 significant bits:
// rounding to nearest even costs up to u = 2^-8 (3.9e-3) of a value, about u / sqrt(3) (2.3e-3)
// RMS near the bottom of a binade. A bf16 candidate rounds twice: the master weights into its
// packed copy (forward, backward data) and its output y or dx, once; products of two bf16 values
// are exact in FP32 and the sums stay FP32 (~1e-6). The two roundings are independent, so y and
// dx come out about sqrt(2/3) u = 3.2e-3 off (relative L2), at most; dw and db are FP32 sums of
// exactly read bf16 inputs, ~1e-6 as in FP32, so set 1's cancellation in dw costs nothing here.
// Measured on the probe (the CPU emulation, a 3x3x32 layer): 2.3e-3 forward and backward data,
// 4e-8 dw. 1e-2 leaves a factor of 3 above the two roundings' 3.2e-3 and still rejects a candidate
// that rounds its partial sums to bf16 (error growing like sqrt of the reduction length: 1.4e-2
// measured over 3x3x32 = 288 terms, tests/tune/test_autotune.cpp) or loses digits as transforms do
// (0.5-7% for FFT or Winograd on 5x5 filters, see kConvAccuracyTolerance). To be checked against
// the probe's bf16 errors of the GPU rows (tests/tune/test_autotune_cuda.cpp; the autotuner logs
// each winner's rel_err).
inline constexpr double kBf16AccuracyTolerance = 1e-2;

// FP16 convolutions (train.precision fp16), measured the same way on f16-exact activations. F16
// keeps 11 significant bits, 3 more than bf16: each rounding (the weights into the candidate's f16
// copy, the output y or dx once) is at most 2^-12 relative, the two together about 4e-4 relative
// L2 (sqrt(2/3) 2^-11). The limit is bf16's scaled by those 3 bits, 1e-2 / 8, again about three
// times two roundings; a candidate that rounds its partial sums to f16 measured 1.8e-3 on a
// 288-term reduction (tests/tune/test_autotune.cpp) and is refused.
inline constexpr double kF16AccuracyTolerance = kBf16AccuracyTolerance / 8;

// The tolerance of a convolution candidate that multiplies in `math` (ConvAlgo::math_used): FP32
// candidates keep kConvAccuracyTolerance, TF32 ones get kTf32AccuracyTolerance.
inline double conv_tolerance(MathMode math) {
  return math == MathMode::tf32 ? kTf32AccuracyTolerance : kConvAccuracyTolerance;
}
// The same for a candidate of activation dtype `dtype` (ConvAlgo::dtype): bf16 ones get
// kBf16AccuracyTolerance and f16 ones kF16AccuracyTolerance whatever the math mode, f32 ones
// conv_tolerance(math).
inline double conv_tolerance(DType dtype, MathMode math) {
  if (dtype == DType::bf16) return kBf16AccuracyTolerance;
  if (dtype == DType::f16) return kF16AccuracyTolerance;
  return conv_tolerance(math);
}

// cuDNN batchnorm (spatial, training forward and backward, running statistics), against our CUDA
// kernels. Its outputs are per-channel reductions over N*H*W values and, in dx, differences of
// such sums (dx = gamma inv_std (dy - mean dy - xhat mean(dy xhat))); two correct FP32
// implementations differ in summation order only, about 1e-6 relative at the batch sizes we run.
// A variance taken as E[x^2] - E[x]^2 in FP32 on a channel whose mean is 8 standard deviations
// (probe set 1) loses about two digits more, and a dx that is a small difference of large sums
// loses what the sums lost: 1e-4, as for convolutions, rejects a formula that loses three digits.
inline constexpr double kBatchnormCudnnTolerance = 1e-4;

// cuDNN max and average pooling, against our CUDA kernels. Max pooling selects elements, so two
// correct implementations agree exactly on tie-free operands (the probes are continuous normals);
// average pooling adds at most R*S values and divides once, a few ulps (1e-7). 1e-5 leaves room
// for that and still rejects a wrong window, padding count or tie rule (errors of order 1).
inline constexpr double kPoolCudnnTolerance = 1e-5;

// cuDNN activations (relu, sigmoid, tanh, elu), against our CUDA kernels. Pointwise: relu is
// exact, the others go through different expf/tanhf implementations that differ by a few ulps
// (1e-7 relative). 1e-5 leaves two orders of magnitude and rejects a wrong formula or coefficient.
inline constexpr double kActivationCudnnTolerance = 1e-5;

// The tolerance of a layer type's cuDNN implementation ("batchnorm", "maxpool", "relu", ...);
// kConvAccuracyTolerance for a type without its own.
inline double cudnn_layer_tolerance(const std::string& layer_type) {
  if (layer_type == "batchnorm") return kBatchnormCudnnTolerance;
  if (layer_type == "maxpool" || layer_type == "avgpool" || layer_type == "global_avgpool") return kPoolCudnnTolerance;
  if (layer_type == "relu" || layer_type == "leaky_relu" || layer_type == "elu" || layer_type == "sigmoid" ||
      layer_type == "tanh")
    return kActivationCudnnTolerance;
  return kConvAccuracyTolerance;
}

}  // namespace cnn
