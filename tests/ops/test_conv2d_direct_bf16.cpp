// CPU tests of the direct BF16 convolutions' host side: which shapes they take and the workspace
// of a backward-filter call. The kernels are tested on the GPU in test_conv2d_direct_bf16_cuda.cpp.
#include "ops/conv2d.h"
#include "ops/conv2d_direct_bf16.h"
#include "support/catch.h"

using namespace cnn;

TEST_CASE("conv2d direct bf16 takes filters that read one input channel", "[cpu]") {
  CHECK(conv2d_direct_bf16_can_implement(Conv2dShape::make(32, 16, 44, 44, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16)));
  CHECK(conv2d_direct_bf16_can_implement(Conv2dShape::make(2, 6, 9, 9, 12, 3, 3, 1, 1, 1, 1, 1, 1, 6)));
  CHECK(conv2d_direct_bf16_can_implement(Conv2dShape::make(64, 1, 40, 40, 64, 3, 3, 1, 1, 1, 1)));
  CHECK_FALSE(conv2d_direct_bf16_can_implement(Conv2dShape::make(2, 4, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2)));
  CHECK_FALSE(conv2d_direct_bf16_can_implement(Conv2dShape::make(2, 4, 8, 8, 8, 3, 3)));
}

TEST_CASE("conv2d direct bf16 splits long filter-gradient sums into slices", "[cpu]") {
  const Conv2dShape small = Conv2dShape::make(1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8);
  const Conv2dShape first = Conv2dShape::make(640, 1, 40, 40, 64, 3, 3, 1, 1, 1, 1);
  CHECK(conv2d_direct_bf16_filter_slices(small) == 1);
  const int slices = conv2d_direct_bf16_filter_slices(first);
  CHECK(slices > 1);
  CHECK(slices == 1024 / 64);  // 1M positions: as many slices as 1024 blocks of 64 channels allow
  CHECK(conv2d_direct_bf16_workspace_bytes(first) == size_t(slices) * 64 * 10 * sizeof(float));
}
