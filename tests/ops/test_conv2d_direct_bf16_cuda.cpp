// Direct BF16 convolutions (conv2d_direct_bf16.h: depthwise with channel multipliers, C == 1 first
// layers) against the CPU reference in double on the same bf16-rounded inputs. Tolerances as for
// the tensor-core kernels (support/tolerance.h): y, dx kBf16OutputVsCpu (one bf16 rounding of the
// output); dw, db kGpuVsCpu (FP32 sums).
// Trap: outputs are poisoned (NaN) before every run, so an element a kernel forgets fails.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "core/cuda_context.h"
#include "ops/conv2d.h"
#include "ops/conv2d_direct_bf16.h"
#include "support/bf16_conv.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::Bf16ConvOperands;
using cnn::test::Bf16Reference;
using cnn::test::check_outputs;
using cnn::test::compare;

TEST_CASE("conv2d direct bf16 matches the cpu reference on depthwise and one-channel shapes", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const std::vector<Conv2dShape> shapes{
      Conv2dShape::make(2, 8, 11, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, false),    // depthwise, odd sizes
      Conv2dShape::make(1, 6, 12, 13, 12, 3, 3, 2, 2, 1, 1, 1, 1, 6),         // multiplier 2, stride 2
      Conv2dShape::make(3, 4, 10, 10, 4, 5, 5, 2, 1, 2, 1, 2, 1, 4),          // 5x5, dilation, mixed stride
      Conv2dShape::make(3, 1, 12, 11, 5, 3, 3, 1, 1, 0, 0),                   // C == 1 first layer
      Conv2dShape::make(2, 1, 40, 40, 64, 3, 3, 1, 1, 1, 1),                  // vgg_fer conv1a at batch 2
      Conv2dShape::make(4, 16, 22, 22, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16, false),  // mini_xception m2_dw1
  };
  uint64_t seed = 700;
  for (const Conv2dShape& sh : shapes) {
    REQUIRE(conv2d_direct_bf16_can_implement(sh));
    const Bf16Reference r(sh, seed += 10);
    for (int64_t offset : {0, 1}) {
      INFO(fmt::format("{}, offset {}", sh.to_string(), offset));
      Bf16ConvOperands d(r, offset);
      d.poison();
      conv2d_forward_direct_bf16_cuda(cuda.ctx(), sh, d.x.data(), d.w.data(), sh.has_bias ? d.b.data() : nullptr,
                                      d.y.data());
      conv2d_backward_data_direct_bf16_cuda(cuda.ctx(), sh, d.w.data(), d.dy.data(), d.dx.data());
      conv2d_backward_filter_direct_bf16_cuda(cuda.ctx(), sh, d.x.data(), d.dy.data(), d.dw.data(), d.db.data());
      cuda.synchronize();
      check_outputs(outputs_of(d), reference_of(r));
    }
  }
  CHECK_FALSE(conv2d_direct_bf16_can_implement(Conv2dShape::make(2, 4, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2)));
  CHECK_FALSE(conv2d_direct_bf16_can_implement(Conv2dShape::make(2, 4, 8, 8, 8, 3, 3)));
}
