// `cnn-bench model --breakdown` on the GPU (bench/benchmark.h): the kernel trace sees the step's
// kernels (conv, batchnorm, optimizer among them), the union of their intervals fits in the traced
// wall time, and the categories add up to the kernels seen.
#include <fmt/format.h>

#include "bench/benchmark.h"
#include "config/model_spec.h"
#include "layers/registry.h"
#include "support/catch.h"

using namespace cnn;

namespace {
const char* kModel =
    "name: trace\ninput: {channels: 3, height: 16, width: 16}\nclasses: [a, b, c, d]\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 8, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: pool1, type: maxpool, kernel: 2}\n"
    "  - {name: flat, type: flatten}\n"
    "  - {name: fc, type: dense, units: 4}\n"
    "train: {batch_size: 8, optimizer: {type: sgd, lr: 0.1, momentum: 0.9}}\n";

void check(const std::vector<std::string>& overrides) {
  ModelBenchOptions opt;
  opt.device = "cuda";
  opt.breakdown = true;
  opt.steps = 4;
  opt.repeats = 1;
  opt.warmup = 2;
  ModelBenchResult r = bench_model(parse_model_text(kModel, "trace.yaml", overrides), opt);
  REQUIRE(r.has_breakdown);
  const StepBreakdown& b = r.breakdown;
  INFO(b.to_table());
  CHECK(b.steps == 4);
  CHECK(b.kernels_per_step >= 5);  // at least conv fwd/bwd, batchnorm, dense, optimizer
  CHECK(b.busy_ms > 0);
  CHECK(b.busy_ms <= b.traced_step_ms * 1.0001);
  double kernels = 0;
  bool conv = false, optimizer = false;
  for (const auto& c : b.categories) {
    kernels += c.kernels_per_step;
    conv = conv || c.name == "conv";
    optimizer = optimizer || c.name == "optimizer";
  }
  CHECK(kernels == Approx(b.kernels_per_step));
  CHECK(conv);
  CHECK(optimizer);
  WARN(fmt::format("{} ({})", b.how, r.cuda_graph));
}
}  // namespace

TEST_CASE("the step breakdown traces the kernels of a captured and an uncaptured step", "[gpu][cupti]") {
  CNN_REQUIRE_GPU();
  check({});
  check({"train.cuda_graph=false"});
}
