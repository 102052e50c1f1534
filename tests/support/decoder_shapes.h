// Shapes and the error measure shared by the CPU tests that rebuild an implicit GEMM's operands
// through its index decoders (test_conv2d_igemm_bf16.cpp, NCHW; test_conv2d_igemm_nhwc_bf16.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/conv2d.h"

namespace cnn::test {

// Every stride, padding and dilation mix the kernels take, odd sizes, N = 1, channel counts that
// are not multiples of 8.
inline std::vector<Conv2dShape> decoder_shapes() {
  return {Conv2dShape::make(2, 3, 7, 9, 4, 3, 3, 1, 1, 1, 1),
          Conv2dShape::make(1, 2, 11, 10, 3, 3, 2, 2, 3, 1, 0, 2, 1),
          Conv2dShape::make(3, 4, 8, 8, 5, 1, 1, 2, 2, 0, 0),
          Conv2dShape::make(1, 1, 12, 12, 6, 3, 3),
          Conv2dShape::make(2, 5, 9, 9, 2, 5, 5, 3, 3, 2, 2),
          Conv2dShape::make(1, 3, 10, 13, 4, 3, 3, 2, 1, 2, 2, 2, 3),
          Conv2dShape::make(2, 2, 6, 5, 3, 2, 3, 3, 2, 1, 2, 1, 1)};
}

// ||a - ref|| / ||ref|| (L2).
inline double rel_l2_error(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += (a[i] - ref[i]) * (a[i] - ref[i]), den += ref[i] * ref[i];
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace cnn::test
