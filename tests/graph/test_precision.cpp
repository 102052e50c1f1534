// Mixed precision in the graph and executor: each layer's dtype from its precision (and f32 where no
// implementation of it supports bf16 or f16, reported), the planned casts (model input, between layers
// of different dtypes, the output for the loss) with their memory, and forward/backward through
// them on the CPU against the all-FP32 run (BF16 rounding of the stored activations only).
#include <cmath>
#include <numeric>

#include "config/model_spec.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "graph/memory_plan.h"
#include "layers/registry.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;

void check_no_conflicts(const MemoryPlan& plan);  // test_memory_plan.cpp

namespace {

// conv a -> flatten f (its own precision) -> dense fc: flatten permutes a channels-last image.
const char* kModel =
    "name: mixed\n"
    "input: {channels: 3, height: 4, width: 5}\n"
    "layers:\n"
    "  - {name: a, type: conv2d, filters: 6, kernel: 3, padding: 1}\n"
    "  - {name: f, type: flatten, precision: bf16}\n"
    "  - {name: fc, type: dense, units: 7}\n";

// conv a -> dense fc -> flatten f (bf16, the last layer: its output is cast to f32 for the loss).
const char* kLastBf16 =
    "name: last\n"
    "input: {channels: 2, height: 3, width: 3}\n"
    "layers:\n"
    "  - {name: a, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
    "  - {name: fc, type: dense, units: 5}\n"
    "  - {name: f, type: flatten, precision: bf16}\n";

struct Run {
  std::vector<float> output;
  std::vector<std::vector<float>> grads;
  std::vector<std::string> notes;
  MemoryPlan plan;
};

Run run(const char* yaml, const std::vector<std::string>& overrides) {
  ModelSpec spec = parse_model_text(yaml, "m.yaml", overrides);
  std::unique_ptr<Graph> graph = Graph::build(spec);
  graph->choose_backends(Device::cpu);
  ExecContext ctx = ExecContext::cpu(1);
  const int64_t n = 3;
  Executor ex(*graph, n, ctx);
  ex.init_params(5);
  const std::vector<float> input = test::random_floats(size_t(ex.input().numel()), 21);
  std::copy(input.begin(), input.end(), ex.input().data());
  ex.forward(n, true, 0, 1);
  Run out;
  out.output = ex.output().to_vector();
  const std::vector<float> r = test::random_floats(out.output.size(), 22);
  REQUIRE(ex.output_grad().dtype() == DType::f32);
  std::copy(r.begin(), r.end(), ex.output_grad().data());
  ex.backward();
  for (size_t p = 0; p < graph->params().size(); ++p)
    if (graph->params()[p].trainable) out.grads.push_back(ex.grad(int(p)).to_vector());
  out.notes = graph->precision_notes();
  out.plan = ex.plan();
  return out;
}

// Relative L2 distance of b from a.
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), n += double(a[i]) * a[i];
  return std::sqrt(d / std::max(n, 1e-30));
}

bool has_note(const Run& r, const std::string& text) {
  return std::any_of(r.notes.begin(), r.notes.end(), [&](const std::string& s) { return s.find(text) != std::string::npos; });
}

}  // namespace

TEST_CASE("precision: a bf16 layer between f32 layers gets casts both ways and matches fp32 to bf16 rounding", "[cpu]") {
  const Run fp32 = run(kModel, {"layers.f.precision=fp32"});
  const Run mixed = run(kModel, {});
  CHECK(fp32.plan.casts.empty());
  REQUIRE(mixed.plan.casts.size() == 2);
  CHECK(mixed.plan.casts[0].from == DType::f32);
  CHECK(mixed.plan.casts[0].to == DType::bf16);
  CHECK(mixed.plan.casts[1].from == DType::bf16);
  CHECK(mixed.plan.casts[1].to == DType::f32);
  CHECK(has_note(mixed, "cast a -> f: f32 NCHW -> bf16 NHWC"));
  CHECK(has_note(mixed, "cast f -> fc: bf16 NHWC -> f32 NCHW"));
  check_no_conflicts(mixed.plan);
  // Only the conv output is rounded to bf16 (relative 2^-9 per element); a wrong permute would
  // scramble the features the dense layer sees and miss by far more.
  const double out_err = rel_l2(fp32.output, mixed.output);
  CHECK(out_err > 0.0);
  CHECK(out_err < 4e-3);
  REQUIRE(fp32.grads.size() == mixed.grads.size());
  for (size_t i = 0; i < fp32.grads.size(); ++i) {
    INFO("parameter " << i);
    CHECK(rel_l2(fp32.grads[i], mixed.grads[i]) < 8e-3);
  }
}

TEST_CASE("precision: a bf16 last layer's output reaches the loss as f32, its gradient comes back", "[cpu]") {
  const Run fp32 = run(kLastBf16, {"layers.f.precision=fp32"});
  const Run mixed = run(kLastBf16, {});
  CHECK(mixed.plan.output_f32.size == int64_t(3 * 5 * sizeof(float)));
  CHECK(mixed.plan.output_grad_f32.size == int64_t(3 * 5 * sizeof(float)));
  CHECK(fp32.plan.output_f32.size == 0);
  CHECK(has_note(mixed, "cast f -> loss: bf16 -> f32"));
  check_no_conflicts(mixed.plan);
  const double out_err = rel_l2(fp32.output, mixed.output);
  CHECK(out_err > 0.0);
  CHECK(out_err < 4e-3);
  for (size_t i = 0; i < fp32.grads.size(); ++i) CHECK(rel_l2(fp32.grads[i], mixed.grads[i]) < 8e-3);
}

namespace {
// A layer type with an f32 implementation only (a copy), to stand for any layer whose op has no
// bf16 row on the device.
class F32OnlyLayer : public Layer {
 public:
  explicit F32OnlyLayer(const LayerSpec& spec) : Layer(spec) {}
  Shape infer_shape(const std::vector<Shape>& in) override { return in[0]; }
  bool backward_needs_inputs() const override { return false; }
  void forward(const RunContext&, const std::vector<const Tensor*>& x, Tensor& y) override {
    std::copy(x[0]->data(), x[0]->data() + y.numel(), y.data());
  }
  void backward(const RunContext&, const std::vector<const Tensor*>&, const Tensor&, const Tensor& dy,
                const std::vector<Tensor*>& dx) override {
    if (dx[0]) std::copy(dy.data(), dy.data() + dy.numel(), dx[0]->data());
  }
};
}  // namespace

TEST_CASE("precision: a layer with no bf16 or f16 implementation stays f32, reported, with casts around it",
          "[cpu]") {
  const std::string precision = GENERATE(as<std::string>(), "bf16", "fp16");
  const DType half = storage_dtype(parse_precision(precision));
  const std::string t = to_string(half);
  INFO(precision);
  LayerRegistry registry;
  register_builtin_layers(registry);
  registry.add("f32only", [](const LayerSpec& s) { return std::make_unique<F32OnlyLayer>(s); },
               Schema("f32only", "a copy, f32 only"));
  const char* yaml =
      "name: g\n"
      "input: {channels: 4, height: 3, width: 3}\n"
      "layers:\n"
      "  - {name: c, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
      "  - {name: o, type: f32only}\n"
      "  - {name: f, type: flatten}\n"
      "  - {name: fc, type: dense, units: 3, precision: fp32}\n";
  ModelSpec spec = parse_model_text(yaml, "g.yaml", {"train.precision=" + precision}, registry.schemas());
  std::unique_ptr<Graph> graph = Graph::build(spec, registry);
  graph->choose_backends(Device::cpu);
  CHECK(graph->node(0).layer->dtype() == half);
  CHECK(graph->node(1).layer->dtype() == DType::f32);  // asked for bf16 or f16, not given
  CHECK(graph->node(1).layer->precision() == parse_precision(precision));
  CHECK(graph->node(2).layer->dtype() == half);
  CHECK(graph->node(3).layer->dtype() == DType::f32);  // its own precision: fp32
  const auto& notes = graph->precision_notes();
  auto has = [&](const std::string& text) {
    return std::any_of(notes.begin(), notes.end(), [&](const std::string& s) { return s.find(text) != std::string::npos; });
  };
  CHECK(has("layer 'o' (f32only) stays f32: no " + t + " implementation of it on the cpu"));
  CHECK(has("cast c -> o: " + t + " NHWC -> f32 NCHW"));
  CHECK(has("cast o -> f: f32 NCHW -> " + t + " NHWC"));
  CHECK(has("cast f -> fc: " + t + " NHWC -> f32 NCHW"));
  CHECK_FALSE(has("-> loss"));
  // And it trains through the casts: forward and backward run, gradients finite and non-zero.
  ExecContext ctx = ExecContext::cpu(1);
  Executor ex(*graph, 2, ctx);
  ex.init_params(3);
  const std::vector<float> input = test::random_floats(size_t(ex.input().numel()), 5);
  std::copy(input.begin(), input.end(), ex.input().data());
  ex.forward(2, true, 0, 1);
  std::fill(ex.output_grad().data(), ex.output_grad().data() + ex.output_grad().numel(), 0.5f);
  ex.backward();
  const std::vector<float> g = ex.grad(0).to_vector();  // c.weight, behind two casts
  CHECK(std::all_of(g.begin(), g.end(), [](float v) { return std::isfinite(v); }));
  CHECK(std::any_of(g.begin(), g.end(), [](float v) { return v != 0.0f; }));
}

TEST_CASE("precision: fp16 layers store f16, cast to and from bf16 and f32 neighbours, and round finer than bf16",
          "[cpu]") {
  const Run fp32 = run(kModel, {"train.precision=fp32", "layers.f.precision=fp32"});
  const Run bf16 = run(kModel, {"train.precision=bf16"});
  const Run fp16 = run(kModel, {"train.precision=fp16", "layers.f.precision=fp16"});
  const Run mixed = run(kModel, {"train.precision=fp16"});  // f keeps its own bf16
  CHECK(fp16.plan.casts.size() == 1);  // only the model input
  CHECK(fp16.plan.casts[0].from == DType::f32);
  CHECK(fp16.plan.casts[0].to == DType::f16);
  CHECK(has_note(fp16, "cast input -> a: f32 NCHW -> f16 NHWC"));
  CHECK(has_note(fp16, "cast fc -> loss: f16 -> f32"));
  CHECK(fp16.plan.output_f32.size == int64_t(3 * 7 * sizeof(float)));
  check_no_conflicts(fp16.plan);
  CHECK(has_note(mixed, "cast a -> f: f16 NHWC -> bf16 NHWC"));
  CHECK(has_note(mixed, "cast f -> fc: bf16 NHWC -> f16 NHWC"));
  check_no_conflicts(mixed.plan);
  // f16 keeps 3 more mantissa bits than bf16: it rounds, but closer to fp32 than bf16 does.
  const double e16 = rel_l2(fp32.output, fp16.output), eb = rel_l2(fp32.output, bf16.output);
  CHECK(e16 > 0.0);
  CHECK(e16 < eb / 2);
  CHECK(e16 < 1e-3);
  REQUIRE(fp32.grads.size() == fp16.grads.size());
  for (size_t i = 0; i < fp32.grads.size(); ++i) {
    INFO("parameter " << i);
    CHECK(rel_l2(fp32.grads[i], fp16.grads[i]) < 2e-3);
    CHECK(rel_l2(fp32.grads[i], mixed.grads[i]) < 8e-3);
  }
}

TEST_CASE("precision: bf16 activations take half the arena bytes of f32 ones", "[cpu]") {
  ModelSpec spec = parse_model_text(kModel, "m.yaml", {});
  std::unique_ptr<Graph> graph = Graph::build(spec);
  graph->choose_backends(Device::cpu);
  const MemoryPlan plan = plan_memory(*graph, 4, true);
  // flatten (bf16) output: 4 x 6*4*5 elements of 2 bytes.
  CHECK(plan.activations[1].size == 4 * 120 * 2);
  CHECK(plan.activations[0].size == 4 * 120 * 4);
  CHECK(plan.gradients[1].size == 4 * 120 * 2);
  // And f16 ones the same.
  ModelSpec half = parse_model_text(kModel, "m.yaml", {"layers.f.precision=fp16"});
  std::unique_ptr<Graph> g16 = Graph::build(half);
  g16->choose_backends(Device::cpu);
  CHECK(g16->node(1).layer->dtype() == DType::f16);
  const MemoryPlan p16 = plan_memory(*g16, 4, true);
  CHECK(p16.activations[1].size == 4 * 120 * 2);
  CHECK(p16.gradients[1].size == 4 * 120 * 2);
}

TEST_CASE("precision: the per-layer key is checked and resolved against train.precision", "[cpu]") {
  ModelSpec spec = parse_model_text(kModel, "m.yaml", {"train.precision=tf32"});
  CHECK(spec.layers[0].precision == "tf32");
  CHECK(spec.layers[1].precision == "bf16");
  CHECK_THROWS_WITH(parse_model_text(kModel, "m.yaml", {"layers.f.precision=fp8"}),
                    Catch::Matchers::Contains("precision"));
}
