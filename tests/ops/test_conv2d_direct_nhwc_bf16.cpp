// CPU tests of the direct NHWC BF16 convolutions' host side: which shapes they take, the filter
// gradient's slices and workspace. The kernels are tested on the GPU in
// test_conv2d_direct_nhwc_bf16_cuda.cpp.
#include "ops/conv2d.h"
#include "ops/conv2d_direct_nhwc_bf16.h"
#include "support/catch.h"

using namespace cnn;

TEST_CASE("conv2d direct nhwc bf16 takes filters that read one input channel", "[cpu]") {
  CHECK(conv2d_direct_nhwc_bf16_can_implement(Conv2dShape::make(32, 16, 44, 44, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16)));
  CHECK(conv2d_direct_nhwc_bf16_can_implement(Conv2dShape::make(2, 6, 9, 9, 12, 7, 7, 1, 1, 3, 3, 1, 1, 6)));
  CHECK(conv2d_direct_nhwc_bf16_can_implement(Conv2dShape::make(64, 1, 40, 40, 64, 3, 3, 1, 1, 1, 1)));
  CHECK_FALSE(conv2d_direct_nhwc_bf16_can_implement(Conv2dShape::make(2, 4, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2)));
  CHECK_FALSE(conv2d_direct_nhwc_bf16_can_implement(Conv2dShape::make(2, 4, 8, 8, 8, 3, 3)));
}

TEST_CASE("conv2d direct nhwc bf16 cuts long filter-gradient sums into slices", "[cpu]") {
  const Conv2dShape small = Conv2dShape::make(1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8);
  const Conv2dShape first = Conv2dShape::make(640, 1, 40, 40, 64, 3, 3, 1, 1, 1, 1);
  const Conv2dShape big7 = Conv2dShape::make(64, 64, 30, 30, 64, 7, 7, 1, 1, 3, 3, 1, 1, 64);
  CHECK(conv2d_direct_nhwc_bf16_filter_slices(small) == 1);
  // 1M positions, 8 channel chunks of the 64 outputs on 8 lanes x 32 pixel lanes: about 4 blocks
  // a multiprocessor of 132 (528 slices), every thread summing over 16+ positions.
  CHECK(conv2d_direct_nhwc_bf16_filter_slices(first) == 528);
  CHECK(conv2d_direct_nhwc_bf16_workspace_bytes(first) == size_t(528) * 64 * 10 * sizeof(float));
  // 7x7 + bias: 50 taps in 5 groups of 10, so fewer slices for the same grid
  CHECK(conv2d_direct_nhwc_bf16_filter_slices(big7) == (528 + 4) / 5);
}
