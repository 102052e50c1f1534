// Host operands of one conv for the GPU conv tests (tests/ops/test_conv2d*_cuda.cpp): random x, w, b,
// dy from `seed` (seed, seed + 1, seed + 2, seed + 3) and zeroed y, dx, dw, db for the results.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/conv2d.h"
#include "support/test_util.h"

namespace cnn::test {

struct ConvHostOperands {
  Conv2dShape sh;
  std::vector<float> x, w, b, dy, y, dx, dw, db;
  ConvHostOperands(const Conv2dShape& shape, uint64_t seed)
      : sh(shape),
        x(random_floats(sh.N * sh.C * sh.H * sh.W, seed)),
        w(random_floats(sh.weight_numel(), seed + 1)),
        b(random_floats(sh.K, seed + 2)),
        dy(random_floats(sh.N * sh.K * sh.P * sh.Q, seed + 3)),
        y(dy.size()),
        dx(x.size()),
        dw(w.size()),
        db(b.size()) {}
};

}  // namespace cnn::test
