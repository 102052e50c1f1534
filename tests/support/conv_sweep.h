// What the conv tests sweep over: the shape sweep (every stride, padding, dilation and groups mix
// on odd sizes) and the named algorithms of one backend.
// Trap: the sweep's sizes follow a running index, so two calls with the same arguments give the
// same shapes in the same order (tests compare runs shape by shape).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"

namespace cnn::test {

// Strides 1..3, paddings 0..2, dilations 1 and 2 and groups 1, 2 and C (depthwise) for 1x1, 3x3
// and 2x3 kernels on odd non-square inputs (H 7..9, W 8..9), N alternating 3 and 1; C input
// channels, K filters (C for the depthwise ones). each_bias: every shape with and without bias;
// else two in three have one.
inline std::vector<Conv2dShape> conv_sweep_shapes(int64_t C, int64_t K, bool each_bias) {
  std::vector<Conv2dShape> shapes;
  const int kernels[][2] = {{1, 1}, {3, 3}, {2, 3}};
  int i = 0;
  for (auto& rs : kernels)
    for (int stride : {1, 2, 3})
      for (int pad : {0, 1, 2})
        for (int dil : {1, 2})
          for (int64_t groups : {int64_t{1}, int64_t{2}, C})
            for (int b = 0; b < (each_bias ? 2 : 1); ++b) {
              const int64_t N = (i++ % 2) ? 1 : 3, H = 7 + i % 3, W = 9 - i % 2;
              const bool bias = each_bias ? b == 0 : i % 3 != 0;
              shapes.push_back(Conv2dShape::make(N, C, H, W, groups == C ? C : K, rs[0], rs[1], stride,
                                                 stride == 3 ? 2 : stride, pad, pad == 2 ? 1 : pad, dil, dil, groups,
                                                 bias));
            }
  return shapes;
}

// The named algorithms of backend b and dtype t, every direction (forward, backward data, backward
// filter).
inline std::vector<ConvAlgo> named_conv_algos(Backend b, DType t = DType::f32) {
  std::vector<ConvAlgo> algos;
  for (ConvDir dir : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter})
    for (const ConvAlgo& a : conv2d_algos(dir))
      if (a.backend == b && a.dtype == t) algos.push_back(a);
  return algos;
}

}  // namespace cnn::test
