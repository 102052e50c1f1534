// The fp16 training step with its loss scaler (model/train_step.h, optim/loss_scaler.h): a step
// whose scaled gradients overflow is skipped (parameters, optimizer slots and the optimizer's step
// count untouched) and halves the scale; the scaler then finds a scale that fits
// and training goes on. On the GPU the captured step takes the same decisions bit for bit.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "model/model_stack.h"
#include "optim/loss_scaler.h"
#include "support/catch.h"
#include "support/random_batch.h"

using namespace cnn;

namespace {

const char* kModel =
    "name: scaled\n"
    "input: {channels: 2, height: 6, width: 6}\n"
    "classes: [a, b, c]\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: flat, type: flatten}\n"
    "  - {name: fc, type: dense, units: 3}\n"
    "train:\n"
    "  precision: fp16\n"
    "  deterministic: true\n"
    "  batch_size: 8\n"
    "  loss_scale: {growth_interval: 3}\n"
    "  optimizer: {type: adam, lr: 0.01}\n";

// The stack the trainer assembles (ModelStack), with the scaler build_step makes for fp16.
struct ScaledRun {
  explicit ScaledRun(const std::string& device, bool cuda_graph, double init)
      : spec(parse_model_text(kModel, "scaled.yaml", {"train.loss_scale.init=" + std::to_string(init)})),
        stack(spec) {
    stack.place(device, true);
    stack.build_executor(8).init_params(5);
    stack.build_optimizer(spec.train.optimizer);
    stack.build_loss(spec.loss, none);
    stack.build_step(0.0, loss_scale_for(spec.train));
    if (!cuda_graph) stack.step().set_cuda_graph(false, "test");
  }

  TrainStep::Result run(uint64_t s) {
    const std::vector<int32_t> labels = test::random_batch(stack.executor(), 7 + s, 8, 3);
    return stack.step().run(labels.data(), 8, 0.01, s, 1);
  }

  // Parameters, then Adam's slots.
  std::vector<float> state() {
    stack.device().synchronize();
    std::vector<float> v = stack.executor().params().to_vector();
    for (const char* slot : {"exp_avg", "exp_avg_sq"}) {
      const std::vector<float> more = stack.optimizer().slot(slot).to_vector();
      v.insert(v.end(), more.begin(), more.end());
    }
    return v;
  }
  const LossScaleState& scaler() const { return stack.loss_scaler()->last(); }
  int64_t optimizer_steps() const { return stack.optimizer().step_count(); }

  Dataset none;
  ModelSpec spec;
  ModelStack stack;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// From 2^24 (far past f16's 65504 for any loss gradient) the first steps overflow: each leaves the
// state as it was and halves the scale; then a clean step updates.
void check_overflow_recovery(ScaledRun& r) {
  REQUIRE(r.stack.graph().node(0).layer->dtype() == DType::f16);
  float scale = 0x1p24f;
  int skipped = 0;
  for (uint64_t s = 0; s < 16; ++s) {
    INFO("step " << s << ", scale " << scale);
    const std::vector<float> before = r.state();
    const int64_t count = r.optimizer_steps();
    const TrainStep::Result res = r.run(s);
    REQUIRE(std::isfinite(res.loss));
    const LossScaleState& st = r.scaler();
    CHECK(res.skipped == (st.found_inf != 0));
    if (res.skipped) {
      ++skipped;
      CHECK(same_bits(r.state(), before));  // weights and optimizer slots untouched
      CHECK(r.optimizer_steps() == count);
      CHECK(st.scale == scale / 2);
      CHECK(st.skipped_steps == skipped);
      scale /= 2;
      continue;
    }
    CHECK(!same_bits(r.state(), before));
    CHECK(r.optimizer_steps() == count + 1);
    CHECK(skipped >= 2);  // 2^24 and 2^23 overflow
    return;
  }
  FAIL("the scaler never found a scale that fits");
}

}  // namespace

TEST_CASE("fp16 step: an overflow skips the update and halves the scale until a clean step trains (cpu)", "[cpu]") {
  ScaledRun r("cpu", false, 0x1p24);
  check_overflow_recovery(r);
}

TEST_CASE("fp16 step: without an overflow the scale grows after the interval and every step trains", "[cpu]") {
  ScaledRun r("cpu", false, 8.0);
  for (uint64_t s = 0; s < 7; ++s) CHECK_FALSE(r.run(s).skipped);
  CHECK(r.scaler().scale == 32.0f);  // doubled at steps 3 and 6
  CHECK(r.scaler().clean_steps == 1);
  CHECK(r.optimizer_steps() == 7);
  CHECK(r.scaler().skipped_steps == 0);
}

TEST_CASE("fp16 step on cuda: the captured step skips and recovers like the uncaptured one, bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  ScaledRun plain("cuda", false, 0x1p24), captured("cuda", true, 0x1p24);
  check_overflow_recovery(plain);
  check_overflow_recovery(captured);
  for (uint64_t s = 16; s < 24; ++s) {
    const TrainStep::Result a = plain.run(s), b = captured.run(s);
    CHECK(a.loss == b.loss);
    CHECK(a.skipped == b.skipped);
  }
  CHECK(captured.stack.step().graph_replays() > 0);
  CHECK(plain.scaler().scale == captured.scaler().scale);
  CHECK(same_bits(plain.state(), captured.state()));
}
