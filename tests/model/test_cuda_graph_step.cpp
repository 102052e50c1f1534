// The CUDA-graph training step: captured steps equal uncaptured ones bit for bit (conv, batchnorm,
// dropout, dense, Adam with an lr that changes every step, clipping, a partial batch that gets its
// own graph; in fp32, tf32 and bf16); the status a CPU run reports; the train.cuda_graph key;
// out-of-memory messages.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "core/error.h"
#include "core/out_of_memory.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "data/dataset.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "optim/optimizer.h"
#include "support/catch.h"
#include "support/param_segments.h"
#include "support/test_util.h"
#include "model/device_setup.h"
#include "model/loss.h"
#include "model/train_step.h"

using namespace cnn;

namespace {

const char* kModel =
    "name: graph_step\n"
    "input: {channels: 2, height: 10, width: 10}\n"
    "classes: [a, b, c, d, e]\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 6, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: pool1, type: maxpool, kernel: 2}\n"
    "  - {name: flat, type: flatten}\n"
    "  - {name: drop1, type: dropout, p: 0.3}\n"
    "  - {name: fc, type: dense, units: 5}\n"
    "loss: {type: softmax_cross_entropy, label_smoothing: 0.1}\n"
    "train:\n"
    "  seed: 11\n"
    "  deterministic: true\n"
    "  batch_size: 16\n"
    "  clip_grad_norm: 0.5\n"
    "  optimizer: {type: adamw, lr: 0.01, weight_decay: 0.01}\n";

// Batch sizes of the steps: full batches, and a partial one that warms up, is captured, replays.
const std::vector<int64_t> kBatches = {16, 16, 16, 16, 10, 16, 16, 10, 10, 16, 10};

struct GraphRun {
  GraphRun(const std::string& device, bool cuda_graph, const std::vector<std::string>& overrides = {})
      : spec(parse_model_text(kModel, "graph_step.yaml", overrides)), graph(Graph::build(spec)) {
    dev = std::make_unique<DeviceSetup>(device, *graph, spec.train.deterministic);
    ex = std::make_unique<Executor>(*graph, spec.train.batch_size, dev->ctx());
    ex->init_params(spec.train.seed);
    const std::vector<ParamSegment> segs = test::trainable_segments(*graph);
    optim = make_optimizer(spec.train.optimizer, segs, graph->params_size(), dev->device());
    loss = std::make_unique<LossFunction>(spec.loss, graph->num_classes(), none);
    step = std::make_unique<TrainStep>(*ex, *loss, *optim, spec.train.clip_grad_norm);
    if (!cuda_graph) step->set_cuda_graph(false, "test");
  }

  // Every step: a fresh seeded batch, the lr of a linear warm-up (changes every step).
  void train(std::vector<double>& losses, std::vector<int64_t>& correct) {
    Rng rng(3, static_cast<uint64_t>(RngStream::test));
    for (size_t s = 0; s < kBatches.size(); ++s) {
      const int64_t n = kBatches[s];
      std::vector<float> x(size_t(ex->input().numel()), 0.0f);
      for (size_t i = 0; i < size_t(n * graph->input_shape().numel()); ++i) x[i] = rng.normal();
      ex->input().copy_from(Tensor::from_vector(ex->input().shape(), x));
      std::vector<int32_t> labels(static_cast<size_t>(n));
      for (auto& y : labels) y = int32_t(rng.below(5));
      const double lr = spec.train.optimizer.lr * double(s + 1) / double(kBatches.size());
      TrainStep::Result r = step->run(labels.data(), n, lr, uint64_t(s), spec.train.seed);
      losses.push_back(r.loss);
      correct.push_back(r.correct);
    }
  }

  std::vector<float> state() {
    dev->synchronize();
    std::vector<float> v = ex->params().to_vector();
    for (const Tensor* t : {&ex->buffers(), &optim->slot("exp_avg"), &optim->slot("exp_avg_sq")}) {
      std::vector<float> more = t->to_vector();
      v.insert(v.end(), more.begin(), more.end());
    }
    return v;
  }

  Dataset none;
  ModelSpec spec;
  std::unique_ptr<Graph> graph;
  std::unique_ptr<DeviceSetup> dev;
  std::unique_ptr<Executor> ex;
  std::unique_ptr<Optimizer> optim;
  std::unique_ptr<LossFunction> loss;
  std::unique_ptr<TrainStep> step;
};

}  // namespace

// In bf16 the batchnorm (+relu) runs as one cooperative kernel a direction (batchnorm_nhwc_bf16.cuh),
// captured as a cooperative kernel node.
TEST_CASE("graph-captured training steps equal uncaptured ones bit for bit, partial batch included", "[gpu]") {
  CNN_REQUIRE_GPU();
  const std::vector<std::string> precision = GENERATE(std::vector<std::string>{},
                                                      std::vector<std::string>{"train.precision=bf16"});
  INFO((precision.empty() ? std::string("fp32") : precision[0]));
  GraphRun plain("cuda", false, precision), captured("cuda", true, precision);
  std::vector<double> plain_loss, captured_loss;
  std::vector<int64_t> plain_correct, captured_correct;
  plain.train(plain_loss, plain_correct);
  captured.train(captured_loss, captured_correct);
  INFO("graph: " << captured.step->cuda_graph_status());
  CHECK(plain.step->graph_replays() == 0);
  // Per size: one warm-up, one capture (launched), then replays: 16 x7 -> 6 launches, 10 x4 -> 3
  // (fewer only if a warm-up grew the shared workspace, which drops every graph and warms again).
  INFO("graph launches: " << captured.step->graph_replays());
  CHECK(captured.step->graph_replays() >= 5);
  CHECK(captured.step->graph_replays() <= 9);
  CHECK(captured.step->cuda_graph_status().rfind("on (step captured, ", 0) == 0);
  REQUIRE(plain_loss.size() == captured_loss.size());
  for (size_t s = 0; s < plain_loss.size(); ++s) {
    INFO("step " << s << ": " << captured_loss[s] << " against " << plain_loss[s]);
    REQUIRE(std::isfinite(plain_loss[s]));
    CHECK(captured_loss[s] == plain_loss[s]);
    CHECK(captured_correct[s] == plain_correct[s]);
  }
  CHECK(captured.optim->step_count() == int64_t(kBatches.size()));
  const std::vector<float> a = plain.state(), b = captured.state();
  REQUIRE(a.size() == b.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0 ? 1 : 0;
  CHECK(differ == 0);
}

TEST_CASE("tf32 training on cuda (cuDNN convolutions, cuBLAS dense) has finite losses, captured or not alike",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  const std::vector<std::string> tf32 = {"train.precision=tf32", "train.backend=cudnn"};
  GraphRun plain("cuda", false, tf32), captured("cuda", true, tf32), fp32("cuda", false, {"train.backend=cudnn"});
  REQUIRE(plain.graph->node(0).layer->math() == MathMode::tf32);
  CHECK(to_string(plain.graph->node(0).layer->backend()) == std::string("cudnn"));
  std::vector<double> plain_loss, captured_loss, fp32_loss;
  std::vector<int64_t> plain_correct, captured_correct, fp32_correct;
  plain.train(plain_loss, plain_correct);
  captured.train(captured_loss, captured_correct);
  fp32.train(fp32_loss, fp32_correct);
  CHECK(captured.step->graph_replays() >= 5);
  REQUIRE(plain_loss.size() == captured_loss.size());
  for (size_t s = 0; s < plain_loss.size(); ++s) {
    INFO("step " << s << ": tf32 " << plain_loss[s] << ", captured " << captured_loss[s] << ", fp32 " << fp32_loss[s]);
    REQUIRE(std::isfinite(plain_loss[s]));
    // The math mode is set per call (cuDNN descriptors, cuBLAS handle), so a replay runs the same
    // TF32 kernels as the uncaptured step: bit for bit.
    CHECK(captured_loss[s] == plain_loss[s]);
    // TF32 rounds the factors (2^-11); AdamW turns tiny gradient differences into full-size steps,
    // so the curves part, but over 11 steps of random labels (loss ~ ln 5) by far less than 5%: a
    // wrong TF32 path (garbage, or a stale math mode) moves it by more within the first steps.
    CHECK(std::abs(plain_loss[s] - fp32_loss[s]) <= 5e-2 * std::abs(fp32_loss[s]));
  }
  const std::vector<float> a = plain.state(), b = captured.state();
  REQUIRE(a.size() == b.size());
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("a cpu training step reports the cuda graph off and trains as before", "[cpu]") {
  GraphRun cpu("cpu", true);
  CHECK(cpu.step->cuda_graph_status() == "off (CPU run)");
  std::vector<double> loss;
  std::vector<int64_t> correct;
  cpu.train(loss, correct);
  CHECK(cpu.step->graph_replays() == 0);
  for (double l : loss) CHECK(std::isfinite(l));
}

TEST_CASE("train.cuda_graph defaults to true and can be turned off by --set", "[cpu]") {
  CHECK(parse_model_text(kModel, "m.yaml").train.cuda_graph);
  CHECK_FALSE(parse_model_text(kModel, "m.yaml", {"train.cuda_graph=false"}).train.cuda_graph);
  CHECK_THROWS_AS(parse_model_text(kModel, "m.yaml", {"train.cuda_graph=sometimes"}), ConfigError);
}

TEST_CASE("an out-of-memory message says what, how much was asked and how much is free", "[cpu]") {
  CHECK(format_byte_count(512) == "512 B");
  CHECK(format_byte_count(1536) == "1.5 KiB");
  CHECK(format_byte_count(3.0 * 1048576) == "3.0 MiB");
  CHECK(format_out_of_memory("activation arena for layers conv1..fc (planned peak 1.2 GiB at batch 32)", "CUDA",
                             size_t(1288490189), size_t(300) << 20, size_t(150110765056ull), "out of memory") ==
        "activation arena for layers conv1..fc (planned peak 1.2 GiB at batch 32): CUDA out of memory: asked for "
        "1.2 GiB, 300.0 MiB free of 139.8 GiB (out of memory)");
  CHECK(format_out_of_memory("x", "CUDA", 1, 2, 3, "") == "x: CUDA out of memory: asked for 1 B, 2 B free of 3 B");
}

TEST_CASE("a model too large for the GPU fails naming the activation arena and its layers", "[gpu]") {
  CNN_REQUIRE_GPU();
  // 24 convolutions whose outputs (8, 16, 16) at batch 2^20 are 2^31 elements each: every tensor
  // is at the per-tensor cap (allowed), and training keeps them all for backward, about 200 GB of
  // activations: no GPU has that, so the arena's cudaMalloc fails.
  std::string yaml = "name: too_large\ninput: {channels: 8, height: 16, width: 16}\nclasses: [a, b]\nlayers:\n";
  for (int i = 1; i <= 24; ++i) yaml += "  - {name: conv" + std::to_string(i) + ", type: conv2d, filters: 8, kernel: 1}\n";
  yaml += "  - {name: gap, type: global_avgpool}\n  - {name: fc, type: dense, units: 2}\n";
  ModelSpec spec = parse_model_text(yaml, "too_large.yaml");
  auto graph = Graph::build(spec);
  DeviceSetup dev("cuda", *graph, false);
  const int64_t batch = int64_t(1) << 20;
  try {
    Executor ex(*graph, batch, dev.ctx());
    FAIL("an executor for batch " << batch << " was built");
  } catch (const OutOfMemoryError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK_THAT(msg, Catch::Matchers::Contains("activation arena for layers conv1..fc (planned peak"));
    CHECK_THAT(msg, Catch::Matchers::Contains("CUDA out of memory: asked for"));
    CHECK_THAT(msg, Catch::Matchers::Contains("free of"));
  }
}
