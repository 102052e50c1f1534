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

TEST_CASE("conv2d direct nhwc bf16 walks rows for 3x3 windows with stride_w 1", "[cpu]") {
  // depthwise with 4-channel groups, a multiplier of 4 or 8, stride_h and dilation_h
  CHECK(conv2d_direct_nhwc_bf16_rows_can_implement(Conv2dShape::make(32, 16, 44, 44, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16)));
  CHECK(conv2d_direct_nhwc_bf16_rows_can_implement(Conv2dShape::make(2, 12, 9, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 12)));
  CHECK(conv2d_direct_nhwc_bf16_rows_can_implement(Conv2dShape::make(64, 1, 48, 48, 8, 3, 3)));
  CHECK(conv2d_direct_nhwc_bf16_rows_can_implement(Conv2dShape::make(2, 2, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2)));
  CHECK(conv2d_direct_nhwc_bf16_rows_can_implement(Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 2, 1, 1, 1, 2, 1, 8)));
  // not: stride_w or dilation_w 2, another window, channel groups not of 4, grouped convolutions
  CHECK_FALSE(conv2d_direct_nhwc_bf16_rows_can_implement(Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 2, 1, 1, 1, 1, 8)));
  CHECK_FALSE(conv2d_direct_nhwc_bf16_rows_can_implement(Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 2, 8)));
  CHECK_FALSE(conv2d_direct_nhwc_bf16_rows_can_implement(Conv2dShape::make(2, 8, 9, 9, 8, 5, 5, 1, 1, 2, 2, 1, 1, 8)));
  CHECK_FALSE(conv2d_direct_nhwc_bf16_rows_can_implement(Conv2dShape::make(2, 6, 9, 9, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6)));
  CHECK_FALSE(conv2d_direct_nhwc_bf16_rows_can_implement(Conv2dShape::make(2, 3, 9, 9, 6, 3, 3, 1, 1, 1, 1, 1, 1, 3)));
  CHECK_FALSE(conv2d_direct_nhwc_bf16_rows_can_implement(Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2)));
  // the forward pass takes the same shapes; the data gradient only stride 1 with multiplier 1
  const Conv2dShape mult4 = Conv2dShape::make(2, 2, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2);
  const Conv2dShape stride_h = Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 2, 1, 1, 1, 2, 1, 8);
  const Conv2dShape dilated_h = Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 2, 1, 2, 1, 8);
  for (const Conv2dShape& sh : {mult4, stride_h, dilated_h})
    CHECK(conv2d_direct_nhwc_bf16_rows_can_implement(sh, ConvDir::forward));
  CHECK_FALSE(conv2d_direct_nhwc_bf16_rows_can_implement(mult4, ConvDir::backward_data));
  CHECK_FALSE(conv2d_direct_nhwc_bf16_rows_can_implement(stride_h, ConvDir::backward_data));
  CHECK(conv2d_direct_nhwc_bf16_rows_can_implement(dilated_h, ConvDir::backward_data));
}

TEST_CASE("conv2d direct nhwc bf16 cuts long filter-gradient sums into slices", "[cpu]") {
  const Conv2dShape small = Conv2dShape::make(1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8);
  const Conv2dShape first = Conv2dShape::make(640, 1, 40, 40, 64, 3, 3, 1, 1, 1, 1);
  const Conv2dShape big7 = Conv2dShape::make(64, 64, 30, 30, 64, 7, 7, 1, 1, 3, 3, 1, 1, 64);
  const auto pixels = DirectNhwcKernel::pixels;
  CHECK(conv2d_direct_nhwc_bf16_filter_slices(small) == 1);
  CHECK(conv2d_direct_nhwc_bf16_filter_slices(small, pixels) == 1);
  // The pixels kernel: 1M positions, 8 channel chunks of the 64 outputs on 8 lanes x 32 pixel
  // lanes: about 4 blocks a multiprocessor of 132 (528 slices), every thread 16+ positions.
  CHECK(conv2d_direct_nhwc_bf16_filter_slices(first, pixels) == 528);
  // 7x7 + bias: 50 taps in 5 groups of 10, so fewer slices for the same grid (and no rows kernel)
  CHECK(conv2d_direct_nhwc_bf16_filter_slices(big7) == (528 + 4) / 5);
  // The rows kernel: 16 groups of 4 channels on 16 lanes x 16 item lanes, 264 blocks' worth of
  // lanes (4224) for 25600 rows of 40: whole rows, 7 a lane (7 * (40 + 2 + 4) = 322 steps with
  // each item's 4, against 13 * (20 + 2 + 4) = 338 for halves), so 25600 / (16 * 7) -> 229 slices.
  CHECK(conv2d_direct_nhwc_bf16_filter_slices(first) == 229);
  CHECK(conv2d_direct_nhwc_bf16_filter_slices(first, DirectNhwcKernel::rows) == 229);
  // The workspace holds either kernel's slices.
  CHECK(conv2d_direct_nhwc_bf16_workspace_bytes(first) == size_t(528) * 64 * 10 * sizeof(float));
  // mini_xception m1_dw2 at batch 32: 1408 rows of 44 on 16896 lanes (4 channel lanes x 64):
  // 11 segments of 4 columns, one a lane, 15488 / 64 -> 242 slices.
  const Conv2dShape dw32 = Conv2dShape::make(32, 16, 44, 44, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16);
  CHECK(conv2d_direct_nhwc_bf16_filter_slices(dw32) == 242);
  CHECK(conv2d_direct_nhwc_bf16_workspace_bytes(dw32) == size_t(242) * 16 * 10 * sizeof(float));
}
