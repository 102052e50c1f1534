// The batchnorm tests' shape builder (tests/ops/test_batchnorm*.cpp).
#pragma once

#include <cstdint>

#include "ops/batchnorm.h"

namespace cnn::test {

inline BatchnormShape make_batchnorm_shape(int64_t N, int64_t C, int64_t H, int64_t W, double eps = 1e-5,
                                           double momentum = 0.1) {
  BatchnormShape sh;
  sh.N = N;
  sh.C = C;
  sh.H = H;
  sh.W = W;
  sh.eps = eps;
  sh.momentum = momentum;
  return sh;
}

}  // namespace cnn::test
