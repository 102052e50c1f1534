// Shape rules of the extra CUDA convolution strategies (conv2d_strategies.h), host logic only so a
// CPU-only build tests them too. Trap: backward_data of Winograd runs the forward algorithm with
// padding 2 - pad, so it needs pad <= 2, while forward and backward_filter take any padding.
#include <cstdint>

#include "ops/conv2d_strategies.h"

namespace cnn {

// cuBLAS takes int dimensions and our kernels index tensors with int64_t; keep every tensor and
// every GEMM dimension below 2^31 elements.
static bool fits_int32(const Conv2dShape& sh) {
  const int64_t lim = int64_t(1) << 31;
  return sh.N * sh.C * sh.H * sh.W < lim && sh.N * sh.K * sh.P * sh.Q < lim && sh.weight_numel() < lim;
}

static bool plain_unit_stride(const Conv2dShape& sh) {
  return sh.stride_h == 1 && sh.stride_w == 1 && sh.dilation_h == 1 && sh.dilation_w == 1 && sh.groups == 1;
}

bool conv2d_winograd_shape_supported(const Conv2dShape& sh, ConvDir dir) {
  if (!fits_int32(sh) || !plain_unit_stride(sh) || sh.R != 3 || sh.S != 3) return false;
  if (dir == ConvDir::backward_data) return sh.pad_h <= 2 && sh.pad_w <= 2;
  return true;
}

bool conv2d_im2col_gemm_shape_supported(const Conv2dShape& sh, ConvDir dir) {
  // One image's columns, (C/groups*R*S) x (P*Q) per group, is one GEMM operand.
  const int64_t lim = int64_t(1) << 31;
  return fits_int32(sh) && sh.C * sh.R * sh.S * sh.P * sh.Q < lim;
}

bool conv2d_fft_shape_supported(const Conv2dShape& sh, ConvDir dir) {
  if (!fits_int32(sh) || !plain_unit_stride(sh)) return false;
  // The transforms cover the padded input (any padding works); beyond 1024 per side one image's
  // spectra alone take megabytes per channel pair, more than any layer we train is worth.
  return sh.H + 2 * sh.pad_h <= 1024 && sh.W + 2 * sh.pad_w <= 1024;
}

}  // namespace cnn
