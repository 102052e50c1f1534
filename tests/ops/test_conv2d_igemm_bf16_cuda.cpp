// BF16 tensor-core convolution (conv2d_igemm_bf16.h) against the CPU reference in double, and the
// GPU casts against core/bf16.h. Inputs are drawn as floats, rounded to bf16 once, and the
// reference sees exactly those rounded values, so the only differences left are the kernels'
// FP32 summation order and, for y and dx, the one rounding of the output to bf16.
// Tolerances (support/tolerance.h): y, dx kBf16OutputVsCpu (the output's bf16 rounding is half an
// ulp, 2^-9 relative: 2^-8 leaves room for the FP32 sum; 1e-4 absolute for sums that cancel near 0);
// dw, db kGpuVsCpu (FP32 results from FP32 sums, as the FP32 kernels).
// Trap: outputs are poisoned (bf16 0xffff and float NaN are NaNs) before every run, so an element
// a kernel forgets to write fails.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "core/bf16.h"
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/device.h"
#include "ops/cast_bf16.h"
#include "ops/conv2d.h"
#include "ops/conv2d_igemm_bf16.h"
#include "support/bf16_conv.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::Bf16ConvOperands;
using cnn::test::Bf16Reference;
using cnn::test::check_outputs;
using cnn::test::compare;
using cnn::test::DeviceBf16;
using cnn::test::DeviceFloats;

namespace {

// Runs the three directions with `plan` (null: the chosen one) and checks each against r.
void check_all(CudaContext& cuda, const Bf16Reference& r, Bf16ConvOperands& d, const IgemmBf16Plan* plan) {
  const ExecContext& ctx = cuda.ctx();
  d.poison();
  conv2d_forward_igemm_bf16_cuda(ctx, r.sh, d.x.data(), d.w.data(), r.sh.has_bias ? d.b.data() : nullptr,
                                 d.y.data(), plan);
  conv2d_backward_data_igemm_bf16_cuda(ctx, r.sh, d.w.data(), d.dy.data(), d.dx.data(), plan);
  conv2d_backward_filter_igemm_bf16_cuda(ctx, r.sh, d.x.data(), d.dy.data(), d.dw.data(), d.db.data(), plan);
  cuda.synchronize();
  check_outputs(outputs_of(d), reference_of(r));
}

// Odd sizes, N = 1, every stride / padding / dilation mix, C == 1, K = 7, reductions that are not
// multiples of 8 (scalar weight loads), planes of 25 and 9 pixels, M past one 128-row tile.
std::vector<Conv2dShape> shapes() {
  return {
      Conv2dShape::make(2, 3, 9, 7, 5, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(1, 8, 11, 13, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, false),
      Conv2dShape::make(3, 16, 10, 10, 24, 1, 1, 2, 2, 0, 0, 1, 1, 1, false),
      Conv2dShape::make(2, 1, 12, 12, 8, 3, 3, 1, 1, 0, 0, 1, 1, 1, false),
      Conv2dShape::make(2, 32, 8, 8, 7, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(1, 20, 15, 9, 33, 3, 2, 2, 1, 2, 0, 2, 3),
      Conv2dShape::make(2, 64, 16, 16, 130, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(4, 128, 5, 5, 128, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(2, 8, 20, 20, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1, false),
      Conv2dShape::make(1, 3, 7, 7, 4, 5, 5, 3, 3, 2, 2),
      Conv2dShape::make(3, 40, 6, 6, 72, 3, 3, 1, 1, 1, 1),
  };
}

}  // namespace

TEST_CASE("conv2d igemm bf16 matches the cpu reference with every tile and split", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  uint64_t seed = 500;
  for (const Conv2dShape& sh : shapes()) {
    const Bf16Reference r(sh, seed += 10);
    for (int64_t offset : {0, 1}) {
      Bf16ConvOperands d(r, offset);
      {
        INFO(fmt::format("{}, offset {}, chosen plan", sh.to_string(), offset));
        check_all(cuda, r, d, nullptr);
      }
      for (int tile = 0; tile < kIgemmBf16Tiles; ++tile)
        for (int splits : {1, 3}) {
          if (offset == 1 && splits == 3) continue;
          const IgemmBf16Plan plan{tile, splits};
          INFO(fmt::format("{}, offset {}, tile {}, splits {}", sh.to_string(), offset,
                           conv2d_igemm_bf16_tile_name(tile), splits));
          check_all(cuda, r, d, &plan);
        }
    }
  }
}

TEST_CASE("conv2d igemm bf16 is deterministic and writes only what is asked", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Bf16Reference r(Conv2dShape::make(4, 64, 20, 20, 128, 3, 3, 1, 1, 1, 1), 900);
  Bf16ConvOperands d(r, 0);
  const IgemmBf16Plan split{0, 7};
  check_all(cuda, r, d, &split);
  const test::Bf16ConvOutputs first = outputs_of(d);
  check_all(cuda, r, d, &split);
  check_outputs(outputs_of(d), first, test::kExact, test::kExact);
  d.dw.poison();
  d.db.poison();
  conv2d_backward_filter_igemm_bf16_cuda(cuda.ctx(), r.sh, d.x.data(), d.dy.data(), nullptr, d.db.data(), &split);
  cuda.synchronize();
  CHECK(compare(d.db.get(), first.db, test::kExact) == "");
  for (float v : d.dw.get()) REQUIRE(std::isnan(v));
}

TEST_CASE("bf16 casts on the gpu give the cpu's bits", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  std::vector<float> x = test::random_floats(100003, 41, -3e4f, 3e4f);
  x[5] = std::nanf("");
  x[6] = -INFINITY;
  x[7] = 3.4e38f;
  for (int64_t offset : {0, 1}) {
    DeviceFloats dx(x, offset), back(std::vector<float>(x.size()), offset);
    DeviceBf16 db(std::vector<bf16>(x.size()), offset);
    cast_float_to_bf16_cuda(cuda.ctx(), int64_t(x.size()), dx.data(), db.data());
    cast_bf16_to_float_cuda(cuda.ctx(), int64_t(x.size()), db.data(), back.data());
    cuda.synchronize();
    const std::vector<float> got = back.get(), via_bf16 = db.get();
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = round_to_bf16(x[i]);
      INFO(fmt::format("offset {} element {}: {} -> {} (want {})", offset, i, x[i], got[i], want));
      REQUIRE((std::memcmp(&got[i], &want, 4) == 0 || (std::isnan(want) && std::isnan(got[i]))));
      REQUIRE((std::memcmp(&via_bf16[i], &want, 4) == 0 || (std::isnan(want) && std::isnan(via_bf16[i]))));
    }
  }
}
