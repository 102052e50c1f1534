// Prepacked weights in GPU training steps (graph/weight_packs.h): a bf16 (and an fp16) model whose
// 16-bit weight copies are packed once a step in one launch trains bit for bit like the same model
// with every op packing its own (train.prepack_weights false): the same losses, gradients and
// parameters step by step, in captured steps (the pack is inside the CUDA graph, so a replay sees
// the optimizer's update), after master weights are replaced under a captured step by a checkpoint
// load, and through the steps the fp16 loss scaler skips.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_state.h"
#include "checkpoint/safetensors.h"
#include "config/model_spec.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "model/model_stack.h"
#include "support/catch.h"
#include "support/random_batch.h"
#include "support/test_util.h"

using namespace cnn;

namespace {

// c1: the GEMM (krsc forward only: it reads the model input); dw: the direct kernels (rsk, forward
// and backward_data share it); pw: cuDNN (krsc both ways, one copy; no bias: cuDNN's 16-bit
// forward refuses one); fc1, fc: dense (K, C) copies.
const char* kModel =
    "name: packed\n"
    "input: {channels: 3, height: 12, width: 12}\n"
    "classes: [a, b, c, d]\n"
    "layers:\n"
    "  - {name: c1, type: conv2d, filters: 16, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: r1, type: relu}\n"
    "  - {name: dw, type: conv2d, filters: 16, kernel: 3, padding: 1, groups: 16, bias: false}\n"
    "  - {name: pw, type: conv2d, filters: 32, kernel: 1, bias: false, backend: cudnn}\n"
    "  - {name: r2, type: relu}\n"
    "  - {name: pool, type: maxpool, kernel: 2}\n"
    "  - {name: flat, type: flatten}\n"
    "  - {name: fc1, type: dense, units: 24}\n"
    "  - {name: r3, type: relu}\n"
    "  - {name: fc, type: dense, units: 4}\n"
    "train:\n"
    "  deterministic: true\n"
    "  batch_size: 8\n"
    "  loss_scale: {growth_interval: 3}\n"
    "  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n";

constexpr int64_t kBatch = 8;

struct PackRun {
  PackRun(bool prepack, const std::string& precision, std::vector<std::string> sets = {})
      : spec([&] {
          sets.push_back(std::string("train.prepack_weights=") + (prepack ? "true" : "false"));
          sets.push_back("train.precision=" + precision);
          return parse_model_text(kModel, "packed.yaml", sets);
        }()),
        stack(spec) {
    stack.place("cuda", true);
    stack.build_executor(kBatch).init_params(5);
    stack.build_optimizer(spec.train.optimizer);
    stack.build_loss(spec.loss, none);
    stack.build_step(0.0, loss_scale_for(spec.train));
  }

  TrainStep::Result run(uint64_t s) {
    const std::vector<int32_t> labels = test::random_batch(stack.executor(), 7 + s, kBatch, 4);
    return stack.step().run(labels.data(), kBatch, 0.05, s, 1);
  }
  std::vector<float> params() {
    stack.device().synchronize();
    return stack.executor().params().to_vector();
  }
  std::vector<float> grads() {
    stack.device().synchronize();
    return stack.executor().grads().to_vector();
  }
  // N of "on (step captured, N nodes)", 0 before a capture.
  size_t graph_nodes() const {
    const std::string s = stack.step().cuda_graph_status();
    const size_t at = s.find("captured, ");
    return at == std::string::npos ? 0 : size_t(std::stoul(s.substr(at + 10)));
  }

  Dataset none;
  ModelSpec spec;
  ModelStack stack;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Steps [from, to) on both runs, checking each step's loss, skip, gradients and parameters.
void step_both(PackRun& on, PackRun& off, uint64_t from, uint64_t to) {
  for (uint64_t s = from; s < to; ++s) {
    INFO("step " << s);
    const TrainStep::Result a = on.run(s), b = off.run(s);
    REQUIRE(std::isfinite(a.loss));
    CHECK(same_bits(a.loss, b.loss));
    CHECK(a.skipped == b.skipped);
    CHECK(a.correct == b.correct);
    CHECK(same_bits(on.grads(), off.grads()));
    CHECK(same_bits(on.params(), off.params()));
  }
}

// A checkpoint of other weights (the parameters of a run initialised with another seed), loaded
// into a run as a resume loads it (load_weights), under its captured step.
void load_other_weights(PackRun& r, const std::string& path) {
  load_weights(r.stack.executor(), SafetensorsFile::open(path), true);
}

std::string write_other_checkpoint(const test::TempDir& dir, const std::string& precision) {
  PackRun other(false, precision);
  other.stack.executor().init_params(99);
  Executor& ex = other.stack.executor();
  SafetensorsWriter w;
  for (size_t i = 0; i < ex.graph().params().size(); ++i) {
    const std::vector<float> v = ex.param(int(i)).to_vector();
    w.add_f32(ex.graph().params()[i].name, ex.graph().params()[i].shape.dims(), v.data());
  }
  const std::string path = (dir / "other.safetensors").string();
  w.write_atomic(path);
  return path;
}

}  // namespace

TEST_CASE("bf16 training steps with prepacked weights equal per-op packing bit for bit, across a checkpoint load",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  PackRun on(true, "bf16"), off(false, "bf16");
  const WeightPackPlan& packs = on.stack.executor().weight_packs();
  INFO(packs.describe());
  CHECK(packs.copies.size() == 5);  // c1 krsc, dw rsk, pw krsc, fc1 and fc (K, C)
  CHECK(off.stack.executor().weight_packs().empty());
  CHECK(on.stack.executor().packed_weights_bytes() > 0);
  step_both(on, off, 0, 6);  // warm-up, capture, replays
  CHECK(on.stack.step().graph_replays() > 0);
  CHECK(off.stack.step().graph_replays() > 0);
  // One pack launch replaces every per-call pack and cast: 9 of them here (c1 forward, dw and pw
  // forward and backward_data, fc1 and fc forward and backward), so 8 fewer graph nodes.
  CHECK(on.graph_nodes() + 8 == off.graph_nodes());
  test::TempDir dir;
  const std::string path = write_other_checkpoint(dir, "bf16");
  load_other_weights(on, path);
  load_other_weights(off, path);
  step_both(on, off, 6, 10);  // replays of the captured steps pack the loaded weights
}

TEST_CASE("fp16 training steps with prepacked weights skip and recover like per-op packing, bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  // From 2^24 the first steps overflow and are skipped (the weights stay; the next step packs them
  // again), then the scale fits and training goes on.
  PackRun on(true, "fp16", {"train.loss_scale.init=16777216"}), off(false, "fp16", {"train.loss_scale.init=16777216"});
  CHECK(on.stack.executor().weight_packs().copies.size() == 5);
  CHECK(on.stack.executor().weight_packs().copies.front().dtype == DType::f16);
  int skipped = 0;
  for (uint64_t s = 0; s < 12; ++s) {
    INFO("step " << s);
    const std::vector<float> before = on.params();
    const TrainStep::Result a = on.run(s), b = off.run(s);
    CHECK(same_bits(a.loss, b.loss));
    CHECK(a.skipped == b.skipped);
    CHECK(same_bits(on.params(), off.params()));
    if (a.skipped) {
      ++skipped;
      CHECK(same_bits(on.params(), before));
    }
  }
  CHECK(skipped >= 2);
  CHECK(on.stack.loss_scaler()->last().scale == off.stack.loss_scaler()->last().scale);
  test::TempDir dir;
  const std::string path = write_other_checkpoint(dir, "fp16");
  load_other_weights(on, path);
  load_other_weights(off, path);
  step_both(on, off, 12, 16);
}
