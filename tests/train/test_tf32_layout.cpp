// tf32 with channels-last FP32 activations (train.tf32_layout nhwc, DType::f32cl) against the same
// model with NCHW ones: on the CPU the f32cl rows permute around the f32 rows (the convolution
// through im2col, which the f32 rows also take on this model's 8-channel layers), so the two runs
// agree bit for bit (losses, gradients, parameters, running statistics, evaluation outputs); on the GPU
// (auto: channels-last) every layer of the model runs f32cl and the runs agree within TF32's noise.
// The model has every layer type vgg_fer and mini_xception train in tf32 but dropout, whose keep
// mask is indexed by the storage index (so the two layouts drop different elements).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "data/dataset.h"
#include "graph/graph.h"
#include "model/model_stack.h"
#include "support/catch.h"
#include "support/step_run.h"
#include "support/test_util.h"

using namespace cnn;

namespace {

using test::rel_l2;
using test::same_bits;

// conv -> batchnorm -> relu twice, a residual add, max and average pooling, flatten, dense.
const char* kModel =
    "name: layout\n"
    "input: {channels: 2, height: 8, width: 8}\n"
    "classes: [a, b, c]\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 8, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: conv2, type: conv2d, filters: 8, kernel: 3, padding: 1}\n"
    "  - {name: bn2, type: batchnorm}\n"
    "  - {name: relu2, type: relu}\n"
    "  - {name: sum, type: add, inputs: [relu1, relu2]}\n"
    "  - {name: pool, type: maxpool, kernel: 2}\n"
    "  - {name: avg, type: avgpool, kernel: 2}\n"
    "  - {name: flat, type: flatten}\n"
    "  - {name: fc, type: dense, units: 3}\n"
    "train:\n"
    "  deterministic: true\n"
    "  batch_size: 8\n"
    "  precision: tf32\n"
    "  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n";

constexpr int64_t kBatch = 8;
constexpr int kSteps = 5;

struct LayoutRun : test::StepRun {
  LayoutRun(const std::string& device, const std::string& layout)
      : StepRun(parse_model_text(kModel, "layout.yaml", {"train.tf32_layout=" + layout}), kBatch, 3) {
    stack.place(device, true);
    build_executor(5);
    build_step();
  }
  // Every layer's activation dtype, in order.
  std::vector<DType> dtypes() const {
    std::vector<DType> out;
    for (int i = 0; i < stack.graph().size(); ++i) out.push_back(stack.graph().node(i).layer->dtype());
    return out;
  }
};

// Whether one of the graph's precision notes contains text.
bool has_note(const Graph& g, const std::string& text) {
  const std::vector<std::string>& notes = g.precision_notes();
  return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

}  // namespace

TEST_CASE("tf32 channels-last on the cpu trains bit for bit like NCHW, and auto stays NCHW there", "[cpu]") {
  LayoutRun cl("cpu", "nhwc"), nchw("cpu", "nchw"), autol("cpu", "auto");
  for (DType t : cl.dtypes()) CHECK(t == DType::f32cl);
  for (DType t : nchw.dtypes()) CHECK(t == DType::f32);
  for (DType t : autol.dtypes()) CHECK(t == DType::f32);
  // The model input (f32 NCHW) reaches conv1 through a planned cast; the loss reads f32.
  CHECK(has_note(cl.stack.graph(), "cast input -> conv1: f32 NCHW -> f32cl NHWC"));
  CHECK(has_note(cl.stack.graph(), "cast fc -> loss: f32cl -> f32"));
  for (uint64_t s = 0; s < kSteps; ++s) {
    INFO("step " << s);
    const double a = cl.run(s), b = nchw.run(s);
    REQUIRE(std::isfinite(a));
    CHECK(a == b);
    CHECK(same_bits(cl.grads(), nchw.grads()));
    CHECK(same_bits(cl.params(), nchw.params()));
    CHECK(same_bits(cl.buffers(), nchw.buffers()));
  }
  CHECK(same_bits(cl.eval(0), nchw.eval(0)));
}

TEST_CASE("a bad train.tf32_layout names the key and the allowed values", "[cpu]") {
  try {
    parse_model_text(kModel, "layout.yaml", {"train.tf32_layout=nwhc"});
    FAIL("accepted tf32_layout nwhc");
  } catch (const std::exception& e) {
    const std::string what = e.what();
    CHECK(what.find("tf32_layout") != std::string::npos);
    CHECK(what.find("nhwc") != std::string::npos);
  }
}

// Grouped and depthwise convolutions have no f32cl row on a GPU (cuDNN's NHWC FP32 support for them
// is unmeasured): such a layer stays f32 NCHW, reported, with casts planned around it; its
// neighbours stay channels-last. Choosing GPU backends needs a CUDA build, not a GPU.
TEST_CASE("under tf32_layout nhwc on cuda a depthwise conv stays f32 with casts, its neighbours f32cl", "[cpu]") {
  if (!backend_built(Backend::cudnn)) return;
  const ModelSpec spec = parse_model_text(
      "name: dw\n"
      "input: {channels: 8, height: 8, width: 8}\n"
      "classes: [a, b]\n"
      "layers:\n"
      "  - {name: conv1, type: conv2d, filters: 8, kernel: 3, padding: 1}\n"
      "  - {name: dw1, type: conv2d, filters: 8, kernel: 3, padding: 1, groups: 8}\n"
      "  - {name: bn1, type: batchnorm}\n"
      "  - {name: gap, type: global_avgpool}\n"
      "  - {name: fc, type: dense, units: 2}\n"
      "train: {precision: tf32, tf32_layout: nhwc}\n",
      "dw.yaml");
  std::unique_ptr<Graph> g = Graph::build(spec);
  g->choose_backends(Device::cuda);
  const std::vector<DType> want{DType::f32cl, DType::f32, DType::f32cl, DType::f32cl, DType::f32cl};
  for (int i = 0; i < g->size(); ++i) {
    INFO(g->node(i).layer->name());
    CHECK(g->node(i).layer->dtype() == want[size_t(i)]);
  }
  CHECK(has_note(*g, "layer 'dw1' (conv2d) stays f32: no f32cl implementation of it on the cuda"));
  CHECK(has_note(*g, "cast conv1 -> dw1: f32cl NHWC -> f32 NCHW"));
  CHECK(has_note(*g, "cast dw1 -> bn1: f32 NCHW -> f32cl NHWC"));

  // Under auto (the default) the same model stays NCHW throughout, no casts, and says why.
  ModelSpec by_default = spec;
  by_default.train.tf32_layout = ModelSpec().train.tf32_layout;
  REQUIRE(by_default.train.tf32_layout == "auto");
  std::unique_ptr<Graph> a = Graph::build(by_default);
  a->choose_backends(Device::cuda);
  for (int i = 0; i < a->size(); ++i) CHECK(a->node(i).layer->dtype() == DType::f32);
  CHECK(has_note(*a, "tf32_layout auto: NCHW, since layer 'dw1' (conv2d) would stay f32 channels-last (no f32cl "
                     "implementation of it on the cuda)"));
  CHECK_FALSE(has_note(*a, "cast "));
  // Without the depthwise layer, auto is channels-last on a GPU.
  ModelSpec plain = by_default;
  plain.layers.erase(plain.layers.begin() + 1);
  std::unique_ptr<Graph> p = Graph::build(plain);
  p->choose_backends(Device::cuda);
  for (int i = 0; i < p->size(); ++i) CHECK(p->node(i).layer->dtype() == DType::f32cl);
}

// A layer's `algo:` wins over the layout: an algorithm with no f32cl row (cpu:winograd) keeps its
// layer f32, reported; the layer without one is f32cl.
TEST_CASE("under tf32_layout nhwc a conv whose algo has no f32cl row stays f32 and runs it", "[cpu]") {
  const ModelSpec spec = parse_model_text(
      "name: algo\n"
      "input: {channels: 16, height: 8, width: 8}\n"
      "classes: [a, b]\n"
      "layers:\n"
      "  - {name: conv1, type: conv2d, filters: 16, kernel: 3, padding: 1, algo: {forward: cpu:winograd}}\n"
      "  - {name: conv2, type: conv2d, filters: 16, kernel: 3, padding: 1}\n"
      "  - {name: gap, type: global_avgpool}\n"
      "  - {name: fc, type: dense, units: 2}\n"
      "train: {precision: tf32, tf32_layout: nhwc}\n",
      "algo.yaml");
  std::unique_ptr<Graph> g = Graph::build(spec);
  g->choose_backends(Device::cpu);
  CHECK(g->node(0).layer->dtype() == DType::f32);
  CHECK(g->node(1).layer->dtype() == DType::f32cl);
  CHECK(has_note(*g, "layer 'conv1' (conv2d) stays f32: no f32cl implementation of it on the cpu"));
}

// TF32 multiplies with 10-bit mantissas: the two layouts' convolutions (different cuDNN kernels) and
// batchnorm sums (different orders) differ by TF32 rounding, amplified through five SGD steps with
// momentum and the relu and max-pool choices; measured on the H200 below these bounds.
TEST_CASE("tf32 on cuda under tf32_layout auto stores every layer channels-last and trains like NCHW within TF32 noise",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  LayoutRun cl("cuda", "auto"), nchw("cuda", "nchw");
  for (DType t : cl.dtypes()) CHECK(t == DType::f32cl);
  CHECK_FALSE(has_note(cl.stack.graph(), "stays f32"));
  for (uint64_t s = 0; s < kSteps; ++s) {
    INFO("step " << s);
    const double a = cl.run(s), b = nchw.run(s);
    REQUIRE(std::isfinite(a));
    CHECK(std::abs(a - b) <= 1e-2 * std::abs(b));
    CHECK(rel_l2(cl.grads(), nchw.grads()) <= 5e-2);
    CHECK(rel_l2(cl.params(), nchw.params()) <= 1e-2);
    CHECK(rel_l2(cl.buffers(), nchw.buffers()) <= 1e-2);
  }
  CHECK(rel_l2(cl.eval(0), nchw.eval(0)) <= 1e-2);
}
