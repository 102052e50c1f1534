// Training on cuda against training on the cpu: the same small model (conv, batchnorm, relu, pool,
// dense; no dropout), seed, initialisation and batches, 30 SGD steps through TrainStep on each.
// SGD with momentum, not Adam: Adam divides by sqrt(v), which turns last-bit differences in
// near-zero gradients into full-size steps, so its curves part for reasons that are not bugs.
// Also GPU-resident batches: f32 against the host loader's, and bf16/fp16 runs fed 16-bit batches
// against the same runs fed f32 ones (cast in the step), bit for bit.
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "core/tensor.h"
#include "data/gpu_dataset.h"
#include "data/loader.h"
#include "data/normalize.h"
#include "data/synthetic_faces.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "optim/optimizer.h"
#include "support/catch.h"
#include "support/param_segments.h"
#include "support/test_util.h"
#include "model/device_setup.h"
#include "eval/evaluate.h"
#include "model/loss.h"
#include "model/train_step.h"
#include "ops/convert.h"

using namespace cnn;

namespace {

constexpr int64_t kSteps = 30;
// Per-step losses: FP32 on both sides, differing only in summation order (GEMMs, batchnorm and loss
// reductions). Perturbing every initial weight by a relative 1e-6 moved this curve by at most 5e-7
// relative over the 30 steps (measured on the CPU), so 1e-3 leaves ample room and still catches a
// wrong gradient or a stale batch, which move the curve by percents within a few steps.
constexpr double kLossRtol = 1e-3;
// Final parameters and running statistics after 30 steps: loose, the gaps accumulate.
constexpr test::Tolerance kParamTol{2e-3, 2e-2};

const char* kModel =
    "name: tiny_gpu\n"
    "input: {channels: 1, height: 14, width: 14}\n"
    "classes: [a, b, c, d]\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 6, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: pool1, type: maxpool, kernel: 2}\n"
    "  - {name: fc, type: dense, units: 4}\n"
    "loss: {type: softmax_cross_entropy}\n"
    "train:\n"
    "  seed: 5\n"
    "  batch_size: 16\n"
    "  deterministic: true\n"
    "  optimizer: {type: sgd, lr: 0.01, momentum: 0.9}\n";

AugmentSpec augment() {
  AugmentSpec a;
  a.crop_size = 14;
  a.crop_padding = 1;
  a.hflip = true;
  a.rotate = 10;
  a.brightness = 0.1;
  return a;
}

LoaderOptions loader_options(const ModelSpec& spec) {
  LoaderOptions o;
  o.batch_size = spec.train.batch_size;
  o.seed = spec.train.seed;
  return o;
}

// One model set up for training on `device` exactly as cnn-bench and the trainer do.
struct TinyRun {
  TinyRun(const std::string& device, const Dataset& train, const std::vector<std::string>& overrides = {})
      : spec(parse_model_text(kModel, "tiny_gpu.yaml", overrides)), graph(Graph::build(spec)) {
    dev = std::make_unique<DeviceSetup>(device, *graph, spec.train.deterministic);
    ex = std::make_unique<Executor>(*graph, spec.train.batch_size, dev->ctx());
    ex->init_params(spec.train.seed);
    const std::vector<ParamSegment> segs = test::trainable_segments(*graph);
    optim = make_optimizer(spec.train.optimizer, segs, graph->params_size(), dev->device());
    loss = std::make_unique<LossFunction>(spec.loss, graph->num_classes(), train);
    step = std::make_unique<TrainStep>(*ex, *loss, *optim, 0.0);
  }
  // One step on the batch already in ex->input().
  double run(const std::vector<int32_t>& labels, int64_t s) {
    const int64_t n = static_cast<int64_t>(labels.size());
    return step->run(labels.data(), n, spec.train.optimizer.lr, static_cast<uint64_t>(s), spec.train.seed).loss;
  }
  std::vector<float> state() {
    dev->synchronize();
    std::vector<float> v = ex->params().to_vector(), b = ex->buffers().to_vector();
    v.insert(v.end(), b.begin(), b.end());
    return v;
  }

  ModelSpec spec;
  std::unique_ptr<Graph> graph;
  std::unique_ptr<DeviceSetup> dev;
  std::unique_ptr<Executor> ex;
  std::unique_ptr<Optimizer> optim;
  std::unique_ptr<LossFunction> loss;
  std::unique_ptr<TrainStep> step;
};

// The first kSteps batches of the host loader (80 samples, 5 batches an epoch, 6 epochs).
std::vector<Batch> host_batches(const Dataset& train, const Normalization& norm, const ModelSpec& spec) {
  Loader l(train, loader_options(spec), norm, augment());
  std::vector<Batch> out;
  for (int64_t e = 0; static_cast<int64_t>(out.size()) < kSteps; ++e) {
    l.start_epoch(e);
    Batch b;
    while (l.next(b) && static_cast<int64_t>(out.size()) < kSteps) out.push_back(b);
  }
  return out;
}

std::vector<double> train_on_host_batches(TinyRun& run, const std::vector<Batch>& batches) {
  std::vector<double> losses;
  for (int64_t s = 0; s < kSteps; ++s) {
    load_batch_input(*run.ex, batches[static_cast<size_t>(s)]);
    losses.push_back(run.run(batches[static_cast<size_t>(s)].labels, s));
  }
  return losses;
}

// The node count of the step's CUDA graph as last captured ("on (step captured, N nodes)"), 0 before.
size_t graph_nodes(const TrainStep& step) {
  const std::string s = step.cuda_graph_status(), key = "captured, ";
  const size_t at = s.find(key);
  return at == std::string::npos ? 0 : size_t(std::stoul(s.substr(at + key.size())));
}

// kSteps steps of `run` on the batches of `gd`, step s's batch stored in the model input's native
// dtype where half(s) (GpuDataset writes it in the executor's layout), else in f32; the graph's
// node count after each step into `nodes` unless null.
std::vector<double> train_on_resident_batches(TinyRun& run, GpuDataset& gd, const std::function<bool(int64_t)>& half,
                                              std::vector<size_t>* nodes = nullptr) {
  const DType native = run.ex->native_input_dtype();
  std::vector<double> losses;
  for (int64_t e = 0; static_cast<int64_t>(losses.size()) < kSteps; ++e) {
    gd.start_epoch(e);
    for (int64_t b = 0; b < gd.batches_per_epoch() && static_cast<int64_t>(losses.size()) < kSteps; ++b) {
      const int64_t s = static_cast<int64_t>(losses.size());
      run.ex->set_input_dtype(half(s) ? native : DType::f32);
      const DType t = run.ex->input_dtype();
      int64_t n = 0;
      gd.make_batch(b, run.ex->input().raw(), BatchFormat{t, activation_layout(t) == Layout::nhwc}, nullptr, n);
      const std::vector<int32_t> labels = gd.batch_labels(b);
      REQUIRE(static_cast<int64_t>(labels.size()) == n);
      losses.push_back(run.run(labels, s));
      if (nodes) nodes->push_back(graph_nodes(*run.step));
    }
  }
  return losses;
}

void check_curves(const std::vector<double>& got, const std::vector<double>& ref) {
  REQUIRE(got.size() == ref.size());
  for (size_t s = 0; s < ref.size(); ++s) {
    INFO("step " << s << ": loss " << got[s] << " against " << ref[s]);
    REQUIRE(std::isfinite(got[s]));
    CHECK(std::abs(got[s] - ref[s]) <= kLossRtol * std::abs(ref[s]));
  }
}

}  // namespace

TEST_CASE("a training run on cuda follows the cpu loss curve", "[gpu]") {
  CNN_REQUIRE_GPU();
  const Dataset train = make_synthetic_faces(80, 4, 1, 14, 14, 31);
  const Normalization norm = compute_normalization(train);
  TinyRun cpu("cpu", train);
  const std::vector<Batch> batches = host_batches(train, norm, cpu.spec);
  const std::vector<double> cpu_losses = train_on_host_batches(cpu, batches);
  TinyRun cuda("cuda", train);
  const std::vector<double> cuda_losses = train_on_host_batches(cuda, batches);
  check_curves(cuda_losses, cpu_losses);
  // The run learns something (first ten steps average 1.73, last ten 1.37 on the CPU), so the
  // comparison is not between two flat lines.
  const auto mean10 = [](auto first) { return std::accumulate(first, first + 10, 0.0) / 10.0; };
  CHECK(mean10(cpu_losses.end() - 10) < 0.9 * mean10(cpu_losses.begin()));
  CHECK(test::compare(cuda.state(), cpu.state(), kParamTol) == "");
}

TEST_CASE("the GPU-resident batches train like the host loader's", "[gpu]") {
  CNN_REQUIRE_GPU();
  const Dataset train = make_synthetic_faces(80, 4, 1, 14, 14, 31);
  const Normalization norm = compute_normalization(train);
  std::vector<double> host_losses;
  {
    TinyRun host("cuda", train);
    host_losses = train_on_host_batches(host, host_batches(train, norm, host.spec));
  }
  TinyRun resident("cuda", train);
  GpuDataset gd(train, loader_options(resident.spec), norm, augment(), resident.dev->ctx());
  REQUIRE(gd.output_shape() == resident.graph->input_shape());
  check_curves(train_on_resident_batches(resident, gd, [](int64_t) { return false; }), host_losses);
}

// The GPU-resident batch stored in the first layer's 16-bit dtype, channels-last (what training
// feeds since the augment kernel writes it) against the f32 batch the step casts (before): the
// same values rounded once at the same point, so the same losses and weights bit for bit, and one
// kernel node fewer in the captured step. The second run also switches to f32 batches for five
// steps and back (as an evaluation between epochs does), so each switch must drop the captured graph.
TEST_CASE("bf16 and fp16 steps on 16-bit GPU-resident batches equal those on cast f32 ones bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  const std::string precision = GENERATE(as<std::string>(), "bf16", "fp16");
  for (int64_t channels : {1, 3}) {
    INFO(precision << ", " << channels << " channel(s)");
    const std::vector<std::string> overrides = {"train.precision=" + precision,
                                                "input.channels=" + std::to_string(channels)};
    const Dataset train = make_synthetic_faces(80, 4, channels, 14, 14, 31);
    const Normalization norm = compute_normalization(train);
    std::vector<double> cast_losses;
    std::vector<float> cast_state;
    size_t cast_nodes = 0;
    {
      TinyRun cast("cuda", train, overrides);
      GpuDataset gd(train, loader_options(cast.spec), norm, augment(), cast.dev->ctx());
      cast_losses = train_on_resident_batches(cast, gd, [](int64_t) { return false; });
      cast_state = cast.state();
      cast_nodes = graph_nodes(*cast.step);
    }
    TinyRun fed("cuda", train, overrides);
    const DType half = storage_dtype(parse_precision(precision));
    REQUIRE(fed.ex->native_input_dtype() == half);  // conv1 reads the input in 16 bits
    GpuDataset gd(train, loader_options(fed.spec), norm, augment(), fed.dev->ctx());
    std::vector<size_t> nodes;
    const auto half_at = [](int64_t s) { return s < 10 || s >= 15; };
    const std::vector<double> losses = train_on_resident_batches(fed, gd, half_at, &nodes);
    REQUIRE(losses.size() == cast_losses.size());
    for (size_t s = 0; s < losses.size(); ++s) {
      INFO("step " << s << ": loss " << losses[s] << " against " << cast_losses[s]);
      REQUIRE(std::isfinite(losses[s]));
      CHECK(losses[s] == cast_losses[s]);
    }
    CHECK(fed.state() == cast_state);
    std::string trail;
    for (size_t k : nodes) trail += std::to_string(k) + " ";
    INFO("graph: " << fed.step->cuda_graph_status() << "; nodes after each step: " << trail);
    CHECK(fed.step->graph_replays() > 0);
    REQUIRE(cast_nodes > 0);
    CHECK(nodes[9] + 1 == cast_nodes);      // captured at step 1 on 16-bit batches: no input cast
    CHECK(nodes[14] == cast_nodes);         // recaptured at step 10 on f32 batches
    CHECK(nodes.back() + 1 == cast_nodes);  // and again at step 15
  }
}
