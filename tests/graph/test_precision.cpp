// Mixed precision in the graph and executor: each layer's dtype from its precision (and f32 where no
// implementation of it supports bf16 or f16, reported), the planned casts (model input, between layers
// of different dtypes, the output for the loss) with their memory, and forward/backward through
// them on the CPU against the all-FP32 run (BF16 rounding of the stored activations only); a model
// input stored in its readers' 16-bit dtype (Executor::set_input_dtype) against the cast f32 one.
#include <cmath>
#include <cstring>
#include <numeric>

#include "config/model_spec.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "graph/memory_plan.h"
#include "layers/registry.h"
#include "support/catch.h"
#include "support/half_bits.h"
#include "support/nhwc.h"
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

// A dense layer reading a (C, H, W) map directly (no flatten) takes its features in (C, H, W) order
// in every precision: under a channels-last dtype it stays f32 behind a permuting cast, reported,
// so its weights mean what they mean in fp32 (a checkpoint, an ONNX export). Read flat from the
// channels-last map, its output would miss the fp32 one by far more than bf16 rounding.
TEST_CASE("precision: a dense layer on a channels-last feature map stays f32, reported, and matches fp32", "[cpu]") {
  const char* yaml =
      "name: direct\n"
      "input: {channels: 3, height: 4, width: 5}\n"
      "layers:\n"
      "  - {name: a, type: conv2d, filters: 6, kernel: 3, padding: 1}\n"
      "  - {name: fc, type: dense, units: 7}\n";
  const Run fp32 = run(yaml, {});
  const Run bf16 = run(yaml, {"train.precision=bf16"});
  CHECK(has_note(bf16, "layer 'fc' (dense) stays f32: its input is a 20-position feature map, which bf16 stores "
                       "channels-last (add a flatten layer before it to run it in bf16)"));
  CHECK(has_note(bf16, "cast a -> fc: bf16 NHWC -> f32 NCHW"));
  const double out_err = rel_l2(fp32.output, bf16.output);
  CHECK(out_err > 0.0);
  CHECK(out_err < 4e-3);
  for (size_t i = 0; i < fp32.grads.size(); ++i) CHECK(rel_l2(fp32.grads[i], bf16.grads[i]) < 8e-3);
  // The same under tf32's channels-last layout; on a 1x1 map (global_avgpool's (C) too) the orders agree.
  const Run cl = run(yaml, {"train.precision=tf32", "train.tf32_layout=nhwc"});
  CHECK(has_note(cl, "layer 'fc' (dense) stays f32: its input is a 20-position feature map, which f32cl stores"));
  const Run one = run(yaml, {"train.precision=bf16", "input.height=1", "input.width=1", "layers.a.padding=0",
                             "layers.a.kernel=1"});
  CHECK_FALSE(has_note(one, "stays f32"));
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

namespace {

// The model input read by two layers (a and b) that meet again in an add.
const char* kTwoReaders =
    "name: two\n"
    "input: {channels: 3, height: 4, width: 4}\n"
    "layers:\n"
    "  - {name: a, type: conv2d, filters: 2, kernel: 3, padding: 1}\n"
    "  - {name: b, type: conv2d, filters: 2, kernel: 1, inputs: [input]}\n"
    "  - {name: s, type: add, inputs: [a, b]}\n"
    "  - {name: f, type: flatten}\n"
    "  - {name: fc, type: dense, units: 3}\n";

std::unique_ptr<Graph> cpu_graph(const char* yaml, const std::vector<std::string>& overrides) {
  std::unique_ptr<Graph> g = Graph::build(parse_model_text(yaml, "m.yaml", overrides));
  g->choose_backends(Device::cpu);
  return g;
}

// How a test stores the batch x (N, C, H, W) in the executor's input.
enum class Stored { f32, half_channels_last, half_nchw };

struct InputRun {
  std::vector<float> eval_output, output;
  std::vector<std::vector<float>> grads;
};

// An evaluation forward, then a training forward and backward of `graph` on the CPU, the batch x
// written by the test itself: as f32, or rounded once (test::half_bits) into the readers' 16-bit
// dtype in channels-last order (what the executor reads without a cast) or, wrongly, in NCHW order.
InputRun run_input(Graph& graph, Stored how) {
  ExecContext ctx = ExecContext::cpu(1);
  const int64_t n = 3;
  Executor ex(graph, n, ctx);
  ex.init_params(5);
  const Shape s = ex.input().shape();
  const std::vector<float> x = test::random_floats(size_t(s.numel()), 21, -2.0f, 2.0f);
  if (how == Stored::f32) {
    std::copy(x.begin(), x.end(), ex.input().data());
  } else {
    ex.set_input_dtype(ex.native_input_dtype());
    REQUIRE(ex.input_dtype() != DType::f32);
    REQUIRE(ex.input().bytes() == x.size() * 2);
    const std::vector<float> order =
        how == Stored::half_nchw ? x : test::nchw_to_nhwc(x, s[0], s[1], s[2], s[3]);
    const std::vector<uint16_t> bits = test::half_bits(order, ex.input_dtype());
    std::memcpy(ex.input().raw(), bits.data(), bits.size() * sizeof(uint16_t));
  }
  InputRun out;
  ex.forward(n, false, 0, 1);
  out.eval_output = ex.output().to_vector();
  ex.forward(n, true, 0, 1);
  out.output = ex.output().to_vector();
  const std::vector<float> r = test::random_floats(out.output.size(), 22);
  std::copy(r.begin(), r.end(), ex.output_grad().data());
  ex.backward();
  for (size_t p = 0; p < graph.params().size(); ++p)
    if (graph.params()[p].trainable) out.grads.push_back(ex.grad(int(p)).to_vector());
  return out;
}

}  // namespace

TEST_CASE("precision: a model input stored in its readers' 16-bit dtype needs no cast and trains bit for bit alike",
          "[cpu]") {
  const std::string precision = GENERATE(as<std::string>(), "bf16", "fp16");
  for (const char* yaml : {kModel, kTwoReaders}) {
    INFO(precision << "\n" << yaml);
    std::unique_ptr<Graph> graph = cpu_graph(yaml, {"train.precision=" + precision, "layers.f.precision=" + precision});
    const InputRun cast = run_input(*graph, Stored::f32);  // f32 input, cast by the executor
    const InputRun fed = run_input(*graph, Stored::half_channels_last);
    CHECK(fed.eval_output == cast.eval_output);
    CHECK(fed.output == cast.output);
    REQUIRE(fed.grads.size() == cast.grads.size());
    for (size_t i = 0; i < cast.grads.size(); ++i) {
      INFO("parameter " << i);
      CHECK(fed.grads[i] == cast.grads[i]);
    }
    // The layers read the buffer as it is, channels-last: the same values in NCHW order are
    // another (wrong) image.
    CHECK(run_input(*graph, Stored::half_nchw).output != cast.output);
  }
}

TEST_CASE("precision: the model input's native dtype is its readers' common 16-bit dtype, and only it is accepted",
          "[cpu]") {
  ExecContext ctx = ExecContext::cpu(1);
  auto native = [&](const char* yaml, const std::vector<std::string>& overrides) {
    std::unique_ptr<Graph> g = cpu_graph(yaml, overrides);
    return Executor(*g, 2, ctx).native_input_dtype();
  };
  CHECK(native(kModel, {"layers.f.precision=fp32"}) == DType::f32);
  CHECK(native(kModel, {}) == DType::f32);  // only f is bf16: the conv reading the input is f32
  CHECK(native(kModel, {"train.precision=bf16"}) == DType::bf16);
  CHECK(native(kModel, {"train.precision=fp16", "layers.f.precision=fp16"}) == DType::f16);
  CHECK(native(kModel, {"train.precision=tf32"}) == DType::f32);
  CHECK(native(kModel, {"train.precision=bf16", "layers.a.precision=fp32"}) == DType::f32);
  CHECK(native(kTwoReaders, {"train.precision=bf16"}) == DType::bf16);
  CHECK(native(kTwoReaders, {"train.precision=bf16", "layers.b.precision=fp32"}) == DType::f32);  // readers disagree
  CHECK(native(kTwoReaders, {"train.precision=bf16", "layers.b.precision=fp16"}) == DType::f32);

  std::unique_ptr<Graph> g = cpu_graph(kModel, {"train.precision=bf16"});
  Executor ex(*g, 2, ctx);
  CHECK(ex.input_dtype() == DType::f32);
  CHECK_THROWS_WITH(ex.set_input_dtype(DType::f16),
                    Catch::Matchers::Contains("stored as f32 or bf16 (its readers' dtype), not f16"));
  CHECK_THROWS_AS(ex.set_input_dtype(DType::i32), Error);
  ex.set_input_dtype(DType::bf16);
  CHECK(ex.input().dtype() == DType::bf16);
  CHECK(ex.input().shape() == Shape{2, 3, 4, 5});
  CHECK_THROWS_AS(ex.input().data(), Error);  // the f32 accessor
  ex.set_input_dtype(DType::f32);
  CHECK(ex.input().dtype() == DType::f32);
  std::unique_ptr<Graph> g32 = cpu_graph(kModel, {"layers.f.precision=fp32"});
  Executor ex32(*g32, 2, ctx);
  CHECK_THROWS_WITH(ex32.set_input_dtype(DType::bf16), Catch::Matchers::Contains("stored as f32, not bf16"));
}

TEST_CASE("precision: convert_input keeps the batch, rounded once into the 16-bit dtype and exactly back", "[cpu]") {
  const std::string precision = GENERATE(as<std::string>(), "bf16", "fp16");
  INFO(precision);
  std::unique_ptr<Graph> g = cpu_graph(kModel, {"train.precision=" + precision, "layers.f.precision=" + precision});
  ExecContext ctx = ExecContext::cpu(1);
  Executor ex(*g, 3, ctx);
  ex.init_params(5);
  const Shape s = ex.input().shape();
  const std::vector<float> x = test::random_floats(size_t(s.numel()), 21, -2.0f, 2.0f);
  std::copy(x.begin(), x.end(), ex.input().data());
  ex.forward(3, false, 0, 1);
  const std::vector<float> cast = ex.output().to_vector();
  const DType t = ex.native_input_dtype();
  ex.convert_input(t);
  REQUIRE(ex.input_dtype() == t);
  const std::vector<uint16_t> want = test::half_bits(test::nchw_to_nhwc(x, s[0], s[1], s[2], s[3]), t);
  std::vector<uint16_t> got(want.size());
  std::memcpy(got.data(), ex.input().raw(), got.size() * sizeof(uint16_t));
  CHECK(got == want);
  ex.forward(3, false, 0, 1);
  CHECK(ex.output().to_vector() == cast);
  ex.convert_input(DType::f32);
  REQUIRE(ex.input_dtype() == DType::f32);
  const std::vector<float> back = ex.input().to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("element " << i);
    REQUIRE(back[i] == (t == DType::bf16 ? round_to_bf16(x[i]) : round_to_f16(x[i])));
  }
}
