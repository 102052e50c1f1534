// Batchnorm's mean offset on the CPU (ops/batchnorm.h "Mean offset", the conv bias folded into a
// batchnorm): x with offset o behaves as x + o without one (the same y, running statistics and
// inference output; save_mean is the mean of x), in every forward entry point; the bf16 and f16
// emulation rows take the offset as the f32 rows do; cuDNN's rows refuse one.
#include <vector>

#include "core/exec_context.h"
#include "ops/batchnorm.h"
#include "support/batchnorm_offset_run.h"
#include "support/batchnorm_shape.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::BnMode;
using cnn::test::BnOffsetInputs;
using cnn::test::BnOffsetOutputs;

namespace {

// Sums of x + o and of x about shifts that differ by o: float rounding of the shifted values only.
constexpr test::Tolerance kOffsetVsAdded{1e-5, 1e-5};

}  // namespace

TEST_CASE("batchnorm with a mean offset equals batchnorm of x plus the offset in every forward entry point", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(2);
  for (const BatchnormShape& sh : {test::make_batchnorm_shape(3, 4, 5, 5), test::make_batchnorm_shape(7, 3, 1, 1)}) {
    const BnOffsetInputs with = test::bn_offset_inputs(sh, 40 + uint64_t(sh.H));
    BnOffsetInputs added = with;  // x + o, no offset
    added.offset.clear();
    const int64_t HW = sh.H * sh.W;
    for (size_t i = 0; i < added.x.size(); ++i) added.x[i] += with.offset[size_t(int64_t(i) / HW % sh.C)];
    for (BnMode mode : {BnMode::plain, BnMode::fused_relu, BnMode::phased}) {
      INFO(test::to_string(mode) << ", N=" << sh.N << " C=" << sh.C << " HW=" << HW);
      const BnOffsetOutputs a = test::run_bn_with_offset(ctx, Backend::cpu, DType::f32, sh, with, mode);
      const BnOffsetOutputs b = test::run_bn_with_offset(ctx, Backend::cpu, DType::f32, sh, added, mode);
      CHECK(test::compare(a.y, b.y, kOffsetVsAdded) == "");
      CHECK(test::compare(a.running_mean, b.running_mean, kOffsetVsAdded) == "");
      CHECK(test::compare(a.running_var, b.running_var, kOffsetVsAdded) == "");
      CHECK(test::compare(a.save_inv_std, b.save_inv_std, kOffsetVsAdded) == "");
      CHECK(test::compare(a.y_infer, b.y_infer, kOffsetVsAdded) == "");
      std::vector<float> mean_of_x = b.save_mean;
      for (size_t c = 0; c < mean_of_x.size(); ++c) mean_of_x[c] -= with.offset[c];
      CHECK(test::compare(a.save_mean, mean_of_x, kOffsetVsAdded) == "");
      // The offset matters: without it the running mean is another one.
      BnOffsetInputs dropped = with;
      dropped.offset.clear();
      const BnOffsetOutputs c = test::run_bn_with_offset(ctx, Backend::cpu, DType::f32, sh, dropped, mode);
      CHECK(test::compare(c.running_mean, b.running_mean, kOffsetVsAdded) != "");
    }
  }
}

TEST_CASE("batchnorm bf16 and f16 emulation rows take the mean offset as the f32 rows do", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(2);
  const BatchnormShape sh = test::make_batchnorm_shape(4, 5, 3, 3);
  for (DType t : {DType::bf16, DType::f16}) {
    // x exact in t, so both runs read the same values; y is rounded once into t.
    const BnOffsetInputs exact = test::bn_offset_inputs(sh, 70, t);
    const test::Tolerance once = t == DType::bf16 ? test::kBf16OutputVsCpu : test::kF16OutputVsCpu;
    for (BnMode mode : {BnMode::plain, BnMode::fused_relu, BnMode::phased}) {
      INFO(to_string(t) << " " << test::to_string(mode));
      const BnOffsetOutputs f = test::run_bn_with_offset(ctx, Backend::cpu, DType::f32, sh, exact, mode);
      const BnOffsetOutputs h = test::run_bn_with_offset(ctx, Backend::cpu, t, sh, exact, mode);
      CHECK(test::compare(h.y, f.y, once) == "");
      CHECK(test::compare(h.y_infer, f.y_infer, once) == "");
      CHECK(test::compare(h.running_mean, f.running_mean, test::kExact) == "");
      CHECK(test::compare(h.running_var, f.running_var, test::kExact) == "");
      CHECK(test::compare(h.save_mean, f.save_mean, test::kExact) == "");
    }
  }
}

TEST_CASE("batchnorm cudnn forward rows refuse a mean offset", "[cpu]") {
  const BatchnormShape sh = test::make_batchnorm_shape(2, 3, 4, 4);
  const float some = 1.0f;
  BatchnormForwardTrain train{nullptr, sh};
  BatchnormForwardInfer infer{nullptr, sh};
  train.mean_offset = infer.mean_offset = &some;
  CHECK_FALSE(op_supports(Backend::cudnn, DType::f32, train));
  CHECK_FALSE(op_supports(Backend::cudnn, DType::f32, infer));
  CHECK(op_supports(Backend::cpu, DType::f32, train));
  CHECK(op_supports(Backend::cpu, DType::bf16, infer));
}
