// NHWC BF16 and F16 tensor-core convolution (conv2d_igemm_nhwc_bf16.h) against the CPU reference in
// double, on the same rounded inputs permuted to NHWC (support/bf16_conv.h), every tile and split
// (f16: every wgmma tile and two mma.sync ones, which differ from bf16 only in the instruction);
// and the GPU weight packing against the CPU's bits. Tolerances as for the NCHW kernels
// (support/tolerance.h): y, dx one rounding of the output (kBf16OutputVsCpu, kF16OutputVsCpu);
// dw, db kGpuVsCpu.
// Trap: outputs are poisoned (NaN) before every run, so an element a kernel forgets to write fails;
// offset 1 breaks 16-byte alignment, which must take the scalar kernels, not fault.
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/cuda_context.h"
#include "ops/conv2d.h"
#include "ops/conv2d_igemm_nhwc_bf16.h"
#include "ops/conv2d_weights_bf16.h"
#include "support/bf16_conv.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::check_outputs;
using cnn::test::compare;
using cnn::test::Device16;
using cnn::test::DeviceFloats;
using cnn::test::NhwcOperands16;
using cnn::test::output_tolerance;
using cnn::test::Reference16;

namespace {

const std::vector<Bf16WeightLayout> kLayouts{Bf16WeightLayout::krsc, Bf16WeightLayout::crsk};

// Runs the three directions with `plan` (null: the chosen one) and checks each against r.
template <typename T>
void check_all(CudaContext& cuda, const Reference16<T>& r, NhwcOperands16<T>& d, const IgemmNhwcBf16Plan* plan) {
  const ExecContext& ctx = cuda.ctx();
  d.poison();
  conv2d_forward_igemm_nhwc_cuda(ctx, r.sh, d.x.data(), d.w[0].data(), r.sh.has_bias ? d.b.data() : nullptr,
                                      d.y.data(), false, plan);
  conv2d_backward_data_igemm_nhwc_cuda(ctx, r.sh, d.w[1].data(), d.dy.data(), d.dx.data(), plan);
  conv2d_backward_filter_igemm_nhwc_cuda(ctx, r.sh, d.x.data(), d.dy.data(), d.dw.data(), d.db.data(), plan);
  cuda.synchronize();
  check_outputs(outputs_of(d), reference_of(r, d), output_tolerance<T>());
}

// Odd sizes, N = 1, every stride / padding / dilation mix, C or K not multiples of 8 (scalar
// kernels), K = 7, 1x1 and 5x5 windows, M past one 256-row tile, N past one 256-column tile.
std::vector<Conv2dShape> shapes() {
  return {
      Conv2dShape::make(2, 3, 9, 7, 5, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(1, 8, 11, 13, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, false),
      Conv2dShape::make(3, 16, 10, 10, 24, 1, 1, 2, 2, 0, 0, 1, 1, 1, false),
      Conv2dShape::make(2, 32, 8, 8, 7, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(1, 24, 15, 9, 40, 3, 2, 2, 1, 2, 0, 2, 3),
      Conv2dShape::make(2, 64, 16, 16, 136, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(4, 128, 5, 5, 128, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(2, 8, 20, 20, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1, false),
      Conv2dShape::make(1, 16, 7, 7, 8, 5, 5, 3, 3, 2, 2),
      Conv2dShape::make(3, 40, 6, 6, 72, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(2, 12, 9, 9, 20, 3, 3, 1, 1, 1, 1),
      Conv2dShape::make(1, 264, 4, 4, 16, 3, 3, 1, 1, 1, 1),
  };
}

// Every shape, aligned and not, with the chosen plan and each of `tiles` at 1 and 3 splits.
template <typename T>
void check_shapes(const std::vector<int>& tiles) {
  CudaContext cuda;
  uint64_t seed = 1500;
  for (const Conv2dShape& sh : shapes()) {
    const Reference16<T> r(sh, seed += 10);
    for (int64_t offset : {0, 1}) {
      NhwcOperands16<T> d(r, offset, kLayouts);
      {
        INFO(fmt::format("{}, offset {}, chosen plan", sh.to_string(), offset));
        check_all(cuda, r, d, nullptr);
      }
      if (offset == 1) continue;  // unaligned: the scalar kernels, whatever the plan
      for (int tile : tiles)
        for (int splits : {1, 3}) {
          const IgemmNhwcBf16Plan plan{tile, splits};
          INFO(fmt::format("{}, tile {}, splits {}", sh.to_string(), conv2d_igemm_nhwc_bf16_tile_name(tile), splits));
          check_all(cuda, r, d, &plan);
        }
    }
  }
}

}  // namespace

TEST_CASE("conv2d igemm nhwc bf16 matches the cpu reference with every tile and split", "[gpu]") {
  CNN_REQUIRE_GPU();
  std::vector<int> tiles;
  for (int tile = 0; tile < kIgemmNhwcBf16Tiles; ++tile) tiles.push_back(tile);
  check_shapes<bf16>(tiles);
}

TEST_CASE("conv2d igemm nhwc f16 matches the cpu reference with the wgmma tiles and two mma.sync ones", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_shapes<f16>({2, 7, 8, 9, 10, 11});
}

namespace {

template <typename T>
void check_relu_and_determinism() {
  CudaContext cuda;
  const Reference16<T> r(Conv2dShape::make(4, 64, 20, 20, 128, 3, 3, 1, 1, 1, 1), 1900);
  NhwcOperands16<T> d(r, 0, kLayouts);
  const IgemmNhwcBf16Plan split{0, 7};
  check_all(cuda, r, d, &split);
  const test::Bf16ConvOutputs first = outputs_of(d);
  check_all(cuda, r, d, &split);
  check_outputs(outputs_of(d), first, test::kExact, test::kExact);
  std::vector<float> relu_ref = d.y_ref;
  for (float& v : relu_ref) v = std::fmax(v, 0.0f);
  for (const IgemmNhwcBf16Plan& plan : {IgemmNhwcBf16Plan{2, 1}, split}) {
    d.y.poison();
    conv2d_forward_igemm_nhwc_cuda(cuda.ctx(), r.sh, d.x.data(), d.w[0].data(), d.b.data(), d.y.data(), true,
                                        &plan);
    cuda.synchronize();
    CHECK(compare(d.y.get(), relu_ref, output_tolerance<T>()) == "");
  }
  // db alone (a plain column sum of dy), dw alone (no ones column)
  for (const IgemmNhwcBf16Plan& plan : {IgemmNhwcBf16Plan{2, 1}, split}) {
    d.dw.poison();
    d.db.poison();
    conv2d_backward_filter_igemm_nhwc_cuda(cuda.ctx(), r.sh, d.x.data(), d.dy.data(), nullptr, d.db.data(), &plan);
    cuda.synchronize();
    CHECK(compare(d.db.get(), r.db, test::kGpuVsCpu) == "");
    for (float v : d.dw.get()) REQUIRE(std::isnan(v));
    d.db.poison();
    conv2d_backward_filter_igemm_nhwc_cuda(cuda.ctx(), r.sh, d.x.data(), d.dy.data(), d.dw.data(), nullptr, &plan);
    cuda.synchronize();
    CHECK(compare(d.dw.get(), r.dw, test::kGpuVsCpu) == "");
    for (float v : d.db.get()) REQUIRE(std::isnan(v));
  }
}

}  // namespace

TEST_CASE("conv2d igemm nhwc bf16 fuses relu and is deterministic", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_relu_and_determinism<bf16>();
}

TEST_CASE("conv2d igemm nhwc f16 fuses relu and is deterministic", "[gpu]") {
  CNN_REQUIRE_GPU();
  check_relu_and_determinism<f16>();
}

TEST_CASE("bf16 and f16 weight packing on the gpu gives the cpu's bits", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Conv2dShape sh = Conv2dShape::make(1, 24, 8, 8, 40, 3, 2);
  const Conv2dShape dw = Conv2dShape::make(1, 16, 8, 8, 32, 5, 3, 1, 1, 0, 0, 1, 1, 16);
  for (const Conv2dShape& s : {sh, dw})
    for (Bf16WeightLayout layout :
         {Bf16WeightLayout::kcrs, Bf16WeightLayout::krsc, Bf16WeightLayout::crsk, Bf16WeightLayout::rsk}) {
      if (!conv2d_weights_bf16_supports(s, layout)) continue;
      INFO(fmt::format("{} {}", s.to_string(), to_string(layout)));
      const std::vector<float> w = test::random_floats(size_t(s.weight_numel()), 77, -3.0f, 3.0f);
      std::vector<bf16> want(w.size());
      conv2d_pack_weights_bf16_cpu(ExecContext::cpu(1), s, layout, w.data(), want.data());
      DeviceFloats dw32(w);
      Device16<bf16> got(std::vector<bf16>(w.size(), bf16{0xffff}));
      conv2d_pack_weights_cuda(cuda.ctx(), s, layout, dw32.data(), got.data());
      // f16: the same index map, each master rounded by core/fp16.h (3e5 overflows to inf).
      std::vector<float> w16 = w;
      w16[0] = 3e5f;
      DeviceFloats dw16(w16);
      Device16<f16> got16(std::vector<f16>(w.size(), f16{0xffff}));
      conv2d_pack_weights_cuda(cuda.ctx(), s, layout, dw16.data(), got16.data());
      cuda.synchronize();
      CHECK(compare(got.get(), test::widen(want), test::kExact) == "");
      std::vector<float> want16 = test::widen(test::packed_on_cpu(s, layout, test::rounded_vector<f16>(w16)));
      std::vector<float> got16h = got16.get();
      // Master element 0 is packed element 0 in every layout: inf there, which compare cannot take.
      REQUIRE(std::isinf(want16[0]));
      CHECK(got16h[0] == want16[0]);
      got16h[0] = want16[0] = 0.0f;
      CHECK(compare(got16h, want16, test::kExact) == "");
    }
}
