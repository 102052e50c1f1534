// The shape structs' checked size arithmetic (issue 16): Conv2dShape::make, Pool2dShape::make and
// the batchnorm shape check refuse what does not fit instead of wrapping or narrowing it.
#include <climits>

#include "core/checked.h"
#include "core/error.h"
#include "ops/batchnorm.h"
#include "ops/conv2d.h"
#include "ops/pool2d.h"
#include "support/catch.h"

using namespace cnn;

using Catch::Matchers::Contains;

TEST_CASE("conv2d shapes refuse strides, padding, dilation and groups beyond an int", "[cpu]") {
  const int64_t big = (int64_t{1} << 32) + 1;
  CHECK_THROWS_WITH(Conv2dShape::make(1, 1, 8, 8, 2, 3, 3, big, 1), Contains("stride 4294967297 is out of range"));
  CHECK_THROWS_WITH(Conv2dShape::make(1, 1, 8, 8, 2, 3, 3, 1, 1, int64_t{1} << 32, 0),
                    Contains("padding 4294967296 is out of range"));
  CHECK_THROWS_WITH(Conv2dShape::make(1, 1, 8, 8, 2, 1, 1, 1, 1, 0, 0, 1, big), Contains("dilation 4294967297"));
  // The largest int is taken as it is.
  const Conv2dShape sh = Conv2dShape::make(1, 1, 8, 8, 2, 3, 3, INT_MAX, INT_MAX, 1, 1);
  CHECK(sh.stride_h == INT_MAX);
  CHECK(sh.P == 1);
  CHECK(sh.Q == 1);
}

TEST_CASE("conv2d shapes refuse operands over the per-tensor cap and dilated kernels that overflow", "[cpu]") {
  // (N, C, H, W) = 2^32 elements.
  CHECK_THROWS_WITH(Conv2dShape::make(int64_t{1} << 16, 1, 256, 256, 1, 1, 1), Contains("the input (N=65536"));
  // Weights K * C * R * S = 2^63 - 1: the negative parameter count of issue 16.
  CHECK_THROWS_WITH(Conv2dShape::make(1, 1, 8, 8, INT64_MAX, 1, 1), Contains("the weights (filters K=9223372036854775807"));
  // Output over the cap from a small input: heavy padding.
  CHECK_THROWS_WITH(Conv2dShape::make(1, 1, 1, 1, 1, 1, 1, 1, 1, 65536, 65536), Contains("the output (N=1"));
  // The widest dilated window: R within the weight cap and dilation an int keep it within 64 bits,
  // and it is larger than the input.
  CHECK_THROWS_WITH(Conv2dShape::make(1, 1, 8, 8, 1, int64_t{1} << 30, 1, 1, 1, 0, 0, INT_MAX), Contains("empty"));
  CHECK_NOTHROW(Conv2dShape::make(1, 1, 1, 1, 1, 1, 1, 1, 1, 1000, 1000));
}

TEST_CASE("pool2d shapes refuse strides and padding beyond an int and inputs over the cap", "[cpu]") {
  CHECK_THROWS_WITH(Pool2dShape::make(PoolKind::max, 1, 1, 8, 8, 2, 2, (int64_t{1} << 32) + 1, 1),
                    Contains("stride 4294967297"));
  CHECK_THROWS_WITH(Pool2dShape::make(PoolKind::avg, 1, 1, 8, 8, int64_t{1} << 33, 2, 1, 1, int64_t{1} << 32, 0),
                    Contains("padding 4294967296"));
  CHECK_THROWS_WITH(Pool2dShape::make(PoolKind::avg, int64_t{1} << 32, 1, 2, 2, 2, 2, 2, 2), Contains("per-tensor cap"));
  const Pool2dShape sh = Pool2dShape::make(PoolKind::max, 1, 1, 8, 8, 2, 2, INT_MAX, INT_MAX);
  CHECK(sh.P == 1);
}

TEST_CASE("batchnorm shapes over the per-tensor cap are refused before any product wraps", "[cpu]") {
  BatchnormShape sh;
  sh.N = int64_t{1} << 40, sh.C = int64_t{1} << 30, sh.H = 1, sh.W = 1 << 30;
  CHECK_THROWS_WITH(batchnorm_check_shape("batchnorm forward", sh), Contains("per-tensor cap"));
  sh.N = 2, sh.C = 3, sh.H = 4, sh.W = 5;
  CHECK_NOTHROW(batchnorm_check_shape("batchnorm forward", sh));
}
