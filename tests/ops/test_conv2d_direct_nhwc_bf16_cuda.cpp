// Direct NHWC BF16 and F16 convolutions (conv2d_direct_nhwc_bf16.h: depthwise with channel
// multipliers, C == 1 first layers) against the CPU reference in double on the same rounded inputs
// permuted to NHWC. Tolerances as for the tensor-core kernels (support/tolerance.h): y, dx one
// rounding of the output (kBf16OutputVsCpu, kF16OutputVsCpu); dw, db kGpuVsCpu (FP32 sums).
// Each direction runs as the call picks it (the rows kernels where they can) and, aligned, each
// kernel by name where it takes the shape; the rows filter gradient twice (the same bits both times).
// Trap: outputs are poisoned (NaN) before every run, so an element a kernel forgets fails; offset 1
// breaks 16-byte (and 8-byte) alignment (the scalar kernels; the pixels filter gradient).
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "core/cuda_context.h"
#include "ops/conv2d.h"
#include "ops/conv2d_direct_nhwc_bf16.h"
#include "ops/conv2d_weights_bf16.h"
#include "support/bf16_conv.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::check_outputs;
using cnn::test::compare;
using cnn::test::kGpuVsCpu;
using cnn::test::NhwcOperands16;
using cnn::test::output_tolerance;
using cnn::test::Reference16;

namespace {

template <typename T>
void check_direct_shapes() {
  CudaContext cuda;
  const std::vector<Conv2dShape> shapes{
      Conv2dShape::make(2, 8, 11, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, false),      // depthwise, 8 channels
      Conv2dShape::make(1, 6, 12, 13, 12, 3, 3, 2, 2, 1, 1, 1, 1, 6),           // multiplier 2, stride 2
      Conv2dShape::make(3, 4, 10, 10, 4, 5, 5, 2, 1, 2, 1, 2, 1, 4),            // 5x5, dilation, mixed stride
      Conv2dShape::make(2, 16, 9, 9, 16, 7, 7, 1, 1, 3, 3, 1, 1, 16),           // 7x7: five tap groups
      Conv2dShape::make(2, 24, 7, 8, 24, 3, 3, 2, 2, 0, 1, 1, 1, 24),           // 24 channels, stride 2
      Conv2dShape::make(2, 4, 9, 9, 32, 3, 3, 1, 1, 1, 1, 1, 1, 4),             // multiplier 8 (16 bytes)
      Conv2dShape::make(3, 1, 12, 11, 5, 3, 3, 1, 1, 0, 0),                     // C == 1, K = 5
      Conv2dShape::make(2, 1, 40, 40, 64, 3, 3, 1, 1, 1, 1),                    // vgg_fer conv1a at batch 2
      Conv2dShape::make(4, 16, 22, 22, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16, false),  // mini_xception m2_dw1
      Conv2dShape::make(1, 136, 6, 6, 136, 3, 3, 1, 1, 1, 1, 1, 1, 136),        // past 32 channel lanes
      // the rows filter gradient: multiplier 1 with 4-channel groups (C = 8, 24: inactive lanes of
      // the second channel group), odd widths, a 1x1 input, stride_h and dilation_h, multipliers 4
      // and 8 (one x element feeds 4 channels), pad 0 and 2, several items a lane (160 rows of 2)
      Conv2dShape::make(3, 8, 7, 13, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8, false),
      Conv2dShape::make(2, 24, 9, 15, 24, 3, 3, 1, 1, 1, 1, 1, 1, 24),
      Conv2dShape::make(5, 16, 1, 1, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16),
      Conv2dShape::make(2, 12, 11, 9, 12, 3, 3, 2, 1, 2, 1, 2, 1, 12),
      Conv2dShape::make(2, 2, 10, 9, 8, 3, 3, 1, 1, 0, 2, 1, 1, 2),
      Conv2dShape::make(3, 1, 14, 17, 8, 3, 3, 1, 1, 0, 0, 1, 1, 1, false),
      Conv2dShape::make(160, 136, 8, 2, 136, 3, 3, 1, 1, 1, 1, 1, 1, 136),
      Conv2dShape::make(16, 16, 44, 44, 16, 3, 3, 1, 1, 1, 1, 1, 1, 16, false),  // m1_dw2 at batch 16
  };
  uint64_t seed = 2700;
  for (const Conv2dShape& sh : shapes) {
    REQUIRE(conv2d_direct_nhwc_bf16_can_implement(sh));
    const Reference16<T> r(sh, seed += 10);
    for (int64_t offset : {0, 1}) {
      INFO(fmt::format("{}, offset {}", sh.to_string(), offset));
      NhwcOperands16<T> d(r, offset, {Bf16WeightLayout::rsk});
      d.poison();
      const ExecContext& ctx = cuda.ctx();
      conv2d_forward_direct_nhwc_cuda(ctx, sh, d.x.data(), d.w[0].data(), sh.has_bias ? d.b.data() : nullptr,
                                      d.y.data());
      conv2d_backward_data_direct_nhwc_cuda(ctx, sh, d.w[0].data(), d.dy.data(), d.dx.data());
      conv2d_backward_filter_direct_nhwc_cuda(ctx, sh, d.x.data(), d.dy.data(), d.dw.data(), d.db.data());
      cuda.synchronize();
      check_outputs(outputs_of(d), reference_of(r, d), output_tolerance<T>());
      d.y.poison();
      conv2d_forward_direct_nhwc_cuda(ctx, sh, d.x.data(), d.w[0].data(), d.b.data(), d.y.data(), true);
      cuda.synchronize();
      std::vector<float> relu_ref = d.y_ref;
      if (sh.has_bias) {
        for (float& v : relu_ref) v = std::fmax(v, 0.0f);
        CHECK(compare(d.y.get(), relu_ref, output_tolerance<T>()) == "");
      }
      if (offset != 0) continue;
      for (DirectNhwcKernel k : {DirectNhwcKernel::pixels, DirectNhwcKernel::rows}) {
        INFO(fmt::format("kernel {}", k == DirectNhwcKernel::rows ? "rows" : "pixels"));
        const bool rows = k == DirectNhwcKernel::rows;
        if (!rows || conv2d_direct_nhwc_bf16_rows_can_implement(sh, ConvDir::forward)) {
          d.y.poison();
          conv2d_forward_direct_nhwc_cuda(ctx, sh, d.x.data(), d.w[0].data(), sh.has_bias ? d.b.data() : nullptr,
                                          d.y.data(), false, k);
          cuda.synchronize();
          CHECK(compare(d.y.get(), d.y_ref, output_tolerance<T>()) == "");
        }
        if (!rows || conv2d_direct_nhwc_bf16_rows_can_implement(sh, ConvDir::backward_data)) {
          d.dx.poison();
          conv2d_backward_data_direct_nhwc_cuda(ctx, sh, d.w[0].data(), d.dy.data(), d.dx.data(), k);
          cuda.synchronize();
          CHECK(compare(d.dx.get(), d.dx_ref, output_tolerance<T>()) == "");
        }
        if (rows && !conv2d_direct_nhwc_bf16_rows_can_implement(sh, ConvDir::backward_filter)) continue;
        std::vector<float> first_dw, first_db;
        for (int run = 0; run < (rows ? 2 : 1); ++run) {
          d.dw.poison();
          d.db.poison();
          conv2d_backward_filter_direct_nhwc_cuda(ctx, sh, d.x.data(), d.dy.data(), d.dw.data(), d.db.data(), k);
          cuda.synchronize();
          CHECK(compare(d.dw.get(), r.dw, kGpuVsCpu) == "");
          CHECK(compare(d.db.get(), r.db, kGpuVsCpu) == "");
          if (run == 0) {
            first_dw = d.dw.get(), first_db = d.db.get();
          } else {
            CHECK(d.dw.get() == first_dw);  // deterministic: bit for bit (no NaN: checked above)
            CHECK(d.db.get() == first_db);
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("conv2d direct nhwc bf16 refuses the rows kernels where they cannot run", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Conv2dShape sh = Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8);
  REQUIRE(conv2d_direct_nhwc_bf16_rows_can_implement(sh));
  const Reference16<bf16> r(sh, 2900);
  NhwcOperands16<bf16> d(r, 1, {Bf16WeightLayout::rsk});  // x, dy 2 bytes off 8-byte alignment
  CHECK_THROWS_WITH(conv2d_backward_filter_direct_nhwc_cuda(cuda.ctx(), sh, d.x.data(), d.dy.data(), d.dw.data(),
                                                            d.db.data(), DirectNhwcKernel::rows),
                    Catch::Matchers::Contains("rows kernel cannot take"));
  CHECK_THROWS_WITH(conv2d_forward_direct_nhwc_cuda(cuda.ctx(), sh, d.x.data(), d.w[0].data(), nullptr, d.y.data(),
                                                    false, DirectNhwcKernel::rows),
                    Catch::Matchers::Contains("rows kernel cannot take"));
  const Conv2dShape strided = Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 2, 1, 1, 1, 1, 1, 8);
  CHECK(conv2d_direct_nhwc_bf16_rows_can_implement(strided, ConvDir::forward));
  CHECK_FALSE(conv2d_direct_nhwc_bf16_rows_can_implement(strided, ConvDir::backward_data));
  const Reference16<bf16> rs(strided, 2910);
  NhwcOperands16<bf16> ds(rs, 0, {Bf16WeightLayout::rsk});
  CHECK_THROWS_WITH(conv2d_backward_data_direct_nhwc_cuda(cuda.ctx(), strided, ds.w[0].data(), ds.dy.data(),
                                                          ds.dx.data(), DirectNhwcKernel::rows),
                    Catch::Matchers::Contains("rows kernel cannot take"));
}

TEST_CASE("conv2d direct nhwc bf16 matches the cpu reference on depthwise and one-channel shapes", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_direct_shapes<bf16>();
}

TEST_CASE("conv2d direct nhwc f16 matches the cpu reference on depthwise and one-channel shapes", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_direct_shapes<f16>();
}
