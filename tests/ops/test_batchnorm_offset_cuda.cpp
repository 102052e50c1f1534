// Batchnorm's mean offset on the GPU (ops/batchnorm.h "Mean offset"): every CUDA forward row with
// a non-null offset against the cpu rows (the emulation for bf16 and f16) on the same inputs: the
// NCHW f32 kernels (what a tf32 layer runs), the channels-last bf16/f16 kernels on their default,
// one-kernel and two-kernel rows, each plain, with a fused relu and as the two phases.
#include <vector>

#include "core/cuda_context.h"
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

// 16-bit outputs: each side rounds once from FP32 values that agree to a few float ulps, so a
// value near a rounding boundary may land one ulp apart (two roundings' worth); FP32 statistics
// within double sums in another order rounded to float.
constexpr test::Tolerance kTwoBf16Roundings{1e-4, 2 * test::kBf16OutputVsCpu.rtol};
constexpr test::Tolerance kTwoF16Roundings{1e-4, 2 * test::kF16OutputVsCpu.rtol};
constexpr test::Tolerance kStatistics{1e-5, 1e-5};

void check_against_cpu(CudaContext& cuda, DType t, const BatchnormShape& sh, const std::vector<std::string>& rows) {
  const ExecContext cpu = ExecContext::cpu(2);
  const BnOffsetInputs in = test::bn_offset_inputs(sh, 90 + uint64_t(sh.C), t);
  const test::Tolerance out = t == DType::f32    ? test::kGpuVsCpu
                              : t == DType::bf16 ? kTwoBf16Roundings
                                                 : kTwoF16Roundings;
  for (BnMode mode : {BnMode::plain, BnMode::fused_relu, BnMode::phased}) {
    const BnOffsetOutputs ref = test::run_bn_with_offset(cpu, Backend::cpu, t, sh, in, mode);
    for (const std::string& row : rows) {
      if (mode == BnMode::phased && !row.empty()) continue;  // the phases have only the default rows
      if (!row.empty() && !op_supports(Backend::cuda, t, BatchnormForwardTrain{nullptr, sh}, row)) continue;
      INFO(to_string(t) << " " << test::to_string(mode) << " row '" << row << "' N=" << sh.N << " C=" << sh.C
                        << " " << sh.H << "x" << sh.W);
      const BnOffsetOutputs gpu = test::run_bn_with_offset(cuda.ctx(), Backend::cuda, t, sh, in, mode, row,
                                                           [&] { cuda.synchronize(); });
      using Field = std::vector<float> BnOffsetOutputs::*;
      for (Field f : {&BnOffsetOutputs::y, &BnOffsetOutputs::y_infer})
        CHECK(test::compare(gpu.*f, ref.*f, out) == "");
      for (Field f : {&BnOffsetOutputs::running_mean, &BnOffsetOutputs::running_var, &BnOffsetOutputs::save_mean,
                      &BnOffsetOutputs::save_inv_std})
        CHECK(test::compare(gpu.*f, ref.*f, kStatistics) == "");
    }
  }
}

}  // namespace

TEST_CASE("batchnorm cuda f32 with a mean offset matches the cpu (the rows a tf32 layer runs)", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  for (const BatchnormShape& sh :
       {test::make_batchnorm_shape(8, 6, 12, 12), test::make_batchnorm_shape(3, 5, 7, 7), test::make_batchnorm_shape(9, 4, 1, 1)})
    check_against_cpu(cuda, DType::f32, sh, {""});
}

TEST_CASE("batchnorm cuda bf16 and f16 with a mean offset match the cpu emulation on every path", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  for (DType t : {DType::bf16, DType::f16})
    for (const BatchnormShape& sh : {test::make_batchnorm_shape(32, 16, 22, 22), test::make_batchnorm_shape(9, 7, 17, 17),
                                     test::make_batchnorm_shape(5, 24, 13, 13)})
      check_against_cpu(cuda, t, sh, {"", "cuda:one_kernel", "cuda:two_kernels"});
}
