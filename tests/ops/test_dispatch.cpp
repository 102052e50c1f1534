// The dispatcher (ops/dispatch.h, ops/registry.cpp): every table has its cpu f32 default row and
// names each row after its backend; a backend or dtype the build has no row for throws an error
// that names the op, the backend and the dtype, and op_supports answers no instead; an
// implementation refuses an operand of a dtype it does not read.
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "ops/activation.h"
#include "ops/add.h"
#include "ops/batchnorm.h"
#include "ops/concat.h"
#include "ops/conv2d_algo.h"
#include "ops/dense.h"
#include "ops/dropout.h"
#include "ops/pool2d.h"
#include "ops/softmax_cross_entropy.h"
#include "support/catch.h"

using namespace cnn;

namespace {

// Every row's name is its backend's or "<backend>:<strategy>"; the default rows are unique.
template <typename Args>
void check_table(bool needs_cpu) {
  const auto& table = Args::table();
  INFO(table.op);
  int cpu_defaults = 0;
  for (const auto& row : table.rows) {
    const std::string_view name = detail::row_name(row.name);
    const std::string_view backend = to_string(row.backend);
    CHECK((name == backend || name.rfind(std::string(backend) + ":", 0) == 0));
    if (row.backend == Backend::cpu && row.dtype == DType::f32 && name == backend) ++cpu_defaults;
    CHECK(find_impl(table, row.backend, row.dtype, name == backend ? std::string_view() : name) == &row);
  }
  CHECK(cpu_defaults == (needs_cpu ? 1 : 0));
  for (const auto& row : table.rows)
    if (row.backend != Backend::cpu) CHECK(backend_built(row.backend));
}

// Every bf16 row has an f16 twin: the same backend and name (train.precision fp16 runs wherever bf16
// does), and no f16 row lacks a bf16 one. Lists the rows it misses.
template <typename Args>
void check_f16_twins() {
  const auto& table = Args::table();
  INFO(table.op);
  for (const auto& row : table.rows) {
    const std::string_view name = detail::row_name(row.name);
    const std::string_view backend = to_string(row.backend);
    const std::string_view asked = name == backend ? std::string_view() : name;
    INFO(std::string(name) << " " << to_string(row.dtype));
    if (row.dtype == DType::bf16) CHECK(find_impl(table, row.backend, DType::f16, asked) != nullptr);
    if (row.dtype == DType::f16) CHECK(find_impl(table, row.backend, DType::bf16, asked) != nullptr);
  }
}

}  // namespace

TEST_CASE("every op table has one cpu f32 default and rows named after their backend", "[cpu]") {
  check_table<ActivationForward>(true);
  check_table<ActivationBackward>(true);
  check_table<ActivationBackwardFromOutput>(true);
  check_table<AddForward>(true);
  check_table<AddBackward>(true);
  check_table<BatchnormForwardTrain>(true);
  check_table<BatchnormForwardInfer>(true);
  check_table<BatchnormBackward>(true);
  check_table<BatchnormForwardStats>(true);
  check_table<BatchnormForwardApply>(true);
  check_table<BatchnormForwardInferAct>(true);
  check_table<BatchnormBackwardStats>(true);
  check_table<BatchnormBackwardApply>(true);
  check_table<BatchnormForwardTrainAct>(true);
  check_table<BatchnormBackwardAct>(true);
  check_table<ConcatForward>(true);
  check_table<ConcatBackward>(true);
  check_table<Conv2dForward>(true);
  check_table<Conv2dBackwardData>(true);
  check_table<Conv2dBackwardFilter>(true);
  check_table<DenseForward>(true);
  check_table<DenseBackward>(true);
  check_table<DropoutForward>(true);
  check_table<DropoutBackward>(true);
  check_table<Pool2dForward>(true);
  check_table<Pool2dBackward>(true);
  check_table<SoftmaxCrossEntropyForward>(true);
  check_table<SoftmaxCrossEntropyBackward>(true);
  check_table<SoftmaxCrossEntropyForwardAsync>(false);  // the capturable forward is CUDA's alone
}

TEST_CASE("the dispatcher names the op, backend and dtype it has no row for", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(1);
  float v[4] = {0, 0, 0, 0};
  const ActivationParams relu{ActivationKind::relu, 0.0f};
  // No bf16 row for the loss in any build (the graph casts the logits to f32 before it).
  const SoftmaxCrossEntropyForward bf16{&ctx, {1, 4, 0.0f}, ConstView(static_cast<const void*>(v), DType::bf16),
                                        nullptr, nullptr, v, nullptr, nullptr};
  CHECK_THROWS_WITH(run_op(Backend::cpu, bf16),
                    Catch::Matchers::Contains("softmax_cross_entropy forward: no cpu implementation for bf16"));
  CHECK_FALSE(op_supports(Backend::cpu, DType::bf16, bf16));
  // No cudnn row for the capturable loss forward, in any build.
  CHECK_THROWS_WITH(run_op(Backend::cudnn, SoftmaxCrossEntropyForwardAsync{&ctx, {1, 4, 0.0f}, v, nullptr, nullptr,
                                                                           v, nullptr, v}),
                    Catch::Matchers::Contains("softmax_cross_entropy forward_async: no cudnn implementation for f32"));
  // A named conv algorithm this build lacks.
  CHECK_THROWS_WITH(run_op(Backend::cpu, Conv2dForward{&ctx, Conv2dShape::make(1, 1, 2, 2, 1, 1, 1), v, v, nullptr, v},
                           "cpu:fft"),
                    Catch::Matchers::Contains("conv2d forward: no implementation 'cpu:fft' for f32"));
  // A backend without kernels in this build says so.
  if (!backend_built(Backend::cuda))
    CHECK_THROWS_WITH(run_op(Backend::cuda, ActivationForward{&ctx, relu, 4, v, v}),
                      Catch::Matchers::Contains("this build has no cuda backend"));
  CHECK(v[0] == 0.0f);
}

TEST_CASE("run_op runs the backend's row and refuses a missing context or a foreign operand dtype", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(1);
  float x[3] = {-1.0f, 0.5f, 2.0f}, y[3] = {9, 9, 9};
  run_op(Backend::cpu, ActivationForward{&ctx, {ActivationKind::relu, 0.0f}, 3, x, y});
  CHECK(y[0] == 0.0f);
  CHECK(y[1] == 0.5f);
  CHECK(y[2] == 2.0f);
  CHECK_THROWS_WITH(run_op(Backend::cpu, ActivationForward{nullptr, {ActivationKind::relu, 0.0f}, 3, x, y}),
                    Catch::Matchers::Contains("without an execution context"));
  // The key dtype (x) is f32, so the f32 row runs, and its checked read of y refuses the bf16 view.
  const ActivationForward mixed{&ctx, {ActivationKind::relu, 0.0f}, 3, x, View(static_cast<void*>(y), DType::bf16)};
  CHECK_THROWS_WITH(run_op(Backend::cpu, mixed), Catch::Matchers::Contains("dtype bf16"));
}

TEST_CASE("every bf16 row of every op table has an f16 row of the same backend and name", "[cpu]") {
  check_f16_twins<ActivationForward>();
  check_f16_twins<ActivationBackward>();
  check_f16_twins<ActivationBackwardFromOutput>();
  check_f16_twins<AddForward>();
  check_f16_twins<AddBackward>();
  check_f16_twins<BatchnormForwardTrain>();
  check_f16_twins<BatchnormForwardInfer>();
  check_f16_twins<BatchnormBackward>();
  check_f16_twins<BatchnormForwardStats>();
  check_f16_twins<BatchnormForwardApply>();
  check_f16_twins<BatchnormForwardInferAct>();
  check_f16_twins<BatchnormBackwardStats>();
  check_f16_twins<BatchnormBackwardApply>();
  check_f16_twins<BatchnormForwardTrainAct>();
  check_f16_twins<BatchnormBackwardAct>();
  check_f16_twins<ConcatForward>();
  check_f16_twins<ConcatBackward>();
  check_f16_twins<Conv2dForward>();
  check_f16_twins<Conv2dBackwardData>();
  check_f16_twins<Conv2dBackwardFilter>();
  check_f16_twins<DenseForward>();
  check_f16_twins<DenseBackward>();
  check_f16_twins<DropoutForward>();
  check_f16_twins<DropoutBackward>();
  check_f16_twins<Pool2dForward>();
  check_f16_twins<Pool2dBackward>();
}
