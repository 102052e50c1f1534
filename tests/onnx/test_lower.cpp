// The lowering of our graph to ONNX nodes (lib/onnx/lower.h), without the ONNX library: which
// nodes each layer type becomes, the batchnorm folding arithmetic against a hand computation, the
// crop and normalisation in front, and the errors that name a layer the export cannot carry.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "graph/graph.h"
#include "layers/registry.h"
#include "onnx/lower.h"
#include "support/catch.h"

using namespace cnn;
using Catch::Matchers::Contains;

namespace {

// Parameter `index` of `g`: 0.1, 0.2, ... in order, except names given in `fixed`.
ParamReader reader(const Graph& g, const std::map<std::string, std::vector<float>>& fixed = {}) {
  return [&g, fixed](int index) {
    const ParamEntry& p = g.params()[size_t(index)];
    auto it = fixed.find(p.name);
    if (it != fixed.end()) return it->second;
    std::vector<float> v(size_t(p.shape.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * float(i + 1);
    return v;
  };
}

OnnxInputSpec input_of(const ModelSpec& spec) {
  OnnxInputSpec in;
  in.channels = spec.input.channels;
  in.data_height = spec.input.height;
  in.data_width = spec.input.width;
  in.norm.mean.assign(size_t(in.channels), 0.5f);
  in.norm.std.assign(size_t(in.channels), 0.25f);
  return in;
}

std::vector<std::string> op_types(const OnnxModel& m) {
  std::vector<std::string> out;
  for (const auto& n : m.nodes) out.push_back(n.op_type);
  return out;
}

const OnnxInitializer& initializer(const OnnxModel& m, const std::string& name) {
  for (const auto& t : m.initializers)
    if (t.name == name) return t;
  FAIL("no initializer '" << name << "'");
  throw std::logic_error("unreachable");
}

const char* kEveryLayer =
    "name: every_layer\n"
    "input: {channels: 2, height: 10, width: 10}\n"
    "classes: [a, b, c]\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 4, kernel: 3, padding: same, dilation: 1, bias: false}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: act1, type: leaky_relu, alpha: 0.2}\n"
    "  - {name: dw, type: conv2d, filters: 4, kernel: 3, padding: 2, dilation: 2, groups: 4}\n"
    "  - {name: act2, type: elu}\n"
    "  - {name: side, type: conv2d, filters: 4, kernel: 1, inputs: [act1]}\n"
    "  - {name: sum, type: add, inputs: [act2, side, act1]}\n"
    "  - {name: cat, type: concat, inputs: [sum, act1]}\n"
    "  - {name: pool, type: avgpool, kernel: 3, stride: 2, padding: 1}\n"
    "  - {name: mp, type: maxpool, kernel: 2}\n"
    "  - {name: sig, type: sigmoid}\n"
    "  - {name: drop, type: dropout, p: 0.4}\n"
    "  - {name: fc1, type: dense, units: 6}\n"
    "  - {name: bn2, type: batchnorm}\n"
    "  - {name: th, type: tanh}\n"
    "  - {name: flat, type: flatten}\n"
    "  - {name: fc2, type: dense, units: 3, bias: false}\n"
    "data: {format: synthetic, augment: {random_crop: {size: 8}}}\n";

}  // namespace

TEST_CASE("every layer type lowers to its ONNX ops, with the crop and normalisation in front", "[cpu]") {
  const ModelSpec spec = parse_model_text(kEveryLayer, "every_layer.yaml");
  const auto g = Graph::build(spec);
  const OnnxModel m = lower_to_onnx(*g, reader(*g), input_of(spec), OnnxLowerOptions{});
  const std::vector<std::string> expected{
      "Slice", "Sub", "Div",                                   // centre crop 8x8 of 10x10, normalisation
      "Conv",                                                  // conv1 with bn1 folded in
      "LeakyRelu", "Conv", "Elu", "Conv", "Add", "Add",        // dw, side, the three-input add
      "Concat", "AveragePool", "MaxPool", "Sigmoid",           // dropout: no node
      "Flatten", "Gemm",                                       // fc1 reads (C, H, W) flat, bn2 folded in
      "Tanh", "Gemm",                                          // a flatten of a flat input: no node
      "Softmax"};
  CHECK(op_types(m) == expected);
  CHECK(m.input_dims == std::vector<int64_t>{0, 2, 10, 10});
  CHECK(m.output_dims == std::vector<int64_t>{0, 3});
  CHECK(initializer(m, "center_crop.starts").int64s == std::vector<int64_t>{1, 1});
  CHECK(initializer(m, "center_crop.ends").int64s == std::vector<int64_t>{9, 9});
  CHECK(initializer(m, "normalize.mean").floats == std::vector<float>{127.5f, 127.5f});
  CHECK(initializer(m, "normalize.std").floats == std::vector<float>{63.75f, 63.75f});
  CHECK(initializer(m, "normalize.mean").dims == std::vector<int64_t>{2, 1, 1});  // not (1, C, 1, 1): OpenCV 4.6
  for (const OnnxNode& n : m.nodes) {
    if (n.name == "dw") {
      CHECK(n.attributes[2].ints == std::vector<int64_t>{2, 2, 2, 2});  // pads
      CHECK(n.attributes[3].ints == std::vector<int64_t>{2, 2});        // dilations
      CHECK(n.attributes[4].i == 4);                                    // group
    }
    if (n.op_type == "AveragePool") CHECK(n.attributes.back().name == "count_include_pad");
  }
  // Every input a node reads is the model input, an initializer or an earlier node's output.
  std::vector<std::string> known{m.input_name};
  for (const auto& t : m.initializers) known.push_back(t.name);
  for (const auto& n : m.nodes) {
    for (const auto& i : n.inputs) CHECK(std::find(known.begin(), known.end(), i) != known.end());
    known.insert(known.end(), n.outputs.begin(), n.outputs.end());
  }
  CHECK(m.nodes.back().outputs[0] == m.output_name);

  OnnxLowerOptions fixed;
  fixed.batch = 5;
  fixed.fold_batchnorm = false;
  const OnnxModel kept = lower_to_onnx(*g, reader(*g), input_of(spec), fixed);
  const std::vector<std::string> ops = op_types(kept);
  CHECK(std::count(ops.begin(), ops.end(), "BatchNormalization") == 2);
  CHECK(kept.input_dims[0] == 5);
  CHECK(kept.output_dims[0] == 5);
}

TEST_CASE("a batchnorm folded into its convolution scales the weights and shifts the bias per channel", "[cpu]") {
  const ModelSpec spec = parse_model_text(
      "name: fold\ninput: {channels: 1, height: 2, width: 2}\nclasses: [a, b]\nlayers:\n"
      "  - {name: conv, type: conv2d, filters: 2, kernel: 1}\n"
      "  - {name: bn, type: batchnorm, eps: 0.5}\n"
      "  - {name: fc, type: dense, units: 2}\n"
      "data: {format: synthetic}\n",
      "fold.yaml");
  const auto g = Graph::build(spec);
  // w' = w s, b' = (b - mean) s + beta with s = gamma / sqrt(var + eps), by hand below.
  const std::map<std::string, std::vector<float>> p{{"conv.weight", {2.0f, -3.0f}},
                                                    {"conv.bias", {1.0f, 0.5f}},
                                                    {"bn.weight", {2.0f, 6.0f}},
                                                    {"bn.bias", {0.25f, -1.0f}},
                                                    {"bn.running_mean", {3.0f, -0.5f}},
                                                    {"bn.running_var", {3.5f, 8.5f}}};
  const OnnxModel m = lower_to_onnx(*g, reader(*g, p), input_of(spec), OnnxLowerOptions{});
  // channel 0: s = 2 / 2 = 1: w' = 2, b' = (1 - 3) + 0.25 = -1.75
  // channel 1: s = 6 / 3 = 2: w' = -6, b' = (0.5 + 0.5) * 2 - 1 = 1
  CHECK(initializer(m, "conv.weight+bn").floats == std::vector<float>{2.0f, -6.0f});
  CHECK(initializer(m, "conv.bias+bn").floats == std::vector<float>{-1.75f, 1.0f});
  CHECK(op_types(m) == std::vector<std::string>{"Sub", "Div", "Conv", "Flatten", "Gemm", "Softmax"});
}

TEST_CASE("a batchnorm that another layer also reads is kept, not folded", "[cpu]") {
  const ModelSpec spec = parse_model_text(
      "name: shared\ninput: {channels: 1, height: 4, width: 4}\nclasses: [a, b]\nlayers:\n"
      "  - {name: conv, type: conv2d, filters: 2, kernel: 1}\n"
      "  - {name: bn, type: batchnorm}\n"
      "  - {name: sum, type: add, inputs: [bn, conv]}\n"
      "  - {name: gap, type: global_avgpool}\n"
      "data: {format: synthetic}\n",
      "shared.yaml");
  const auto g = Graph::build(spec);
  const OnnxModel m = lower_to_onnx(*g, reader(*g), input_of(spec), OnnxLowerOptions{});
  CHECK(op_types(m) == std::vector<std::string>{"Sub", "Div", "Conv", "BatchNormalization", "Add",
                                                "GlobalAveragePool", "Flatten", "Softmax"});
}

TEST_CASE("a layer type the exporter does not know is an error naming the layer and its file", "[cpu]") {
  LayerRegistry r;
  register_builtin_layers(r);
  r.add("mystery", make_flatten_layer, Schema("mystery", "a layer type only this test has"));
  const ModelSpec spec = parse_model_text(
      "name: odd\ninput: {channels: 1, height: 4, width: 4}\nclasses: [a, b]\nlayers:\n"
      "  - {name: conv, type: conv2d, filters: 2, kernel: 1}\n"
      "  - {name: strange, type: mystery}\n"
      "  - {name: fc, type: dense, units: 2}\n"
      "data: {format: synthetic}\n",
      "odd.yaml", {}, r.schemas());
  const auto g = Graph::build(spec, r);
  REQUIRE_THROWS_WITH(lower_to_onnx(*g, reader(*g), input_of(spec), OnnxLowerOptions{}),
                      Contains("layer 'strange' (mystery, odd.yaml:6") && Contains("no ONNX form for this layer type"));
}

TEST_CASE("a layer key the exporter does not know is an error, not a key silently dropped", "[cpu]") {
  LayerRegistry r;
  for (const std::string& t : LayerRegistry::builtin().types())
    if (t != "relu") r.add(t, [](const LayerSpec& s) { return LayerRegistry::builtin().create(s); },
                           LayerRegistry::builtin().schemas().at(t));
  Schema relu("relu", "max(x, 0) with a key the exporter has never heard of");
  relu.key("ceiling", Type::real(0.0, 100.0), "clip above").defaults_to(6.0);
  r.add("relu", make_activation_layer, relu);
  const ModelSpec spec = parse_model_text(
      "name: clip\ninput: {channels: 1, height: 4, width: 4}\nclasses: [a, b]\nlayers:\n"
      "  - {name: conv, type: conv2d, filters: 2, kernel: 1}\n"
      "  - {name: r6, type: relu}\n"
      "  - {name: fc, type: dense, units: 2}\n"
      "data: {format: synthetic}\n",
      "clip.yaml", {}, r.schemas());
  const auto g = Graph::build(spec, r);
  REQUIRE_THROWS_WITH(lower_to_onnx(*g, reader(*g), input_of(spec), OnnxLowerOptions{}),
                      Contains("layer 'r6' (relu, clip.yaml:6") && Contains("key 'ceiling'"));
}

TEST_CASE("an opset outside 13..17 or a negative batch is refused", "[cpu]") {
  const ModelSpec spec = parse_model_text(kEveryLayer, "every_layer.yaml");
  const auto g = Graph::build(spec);
  OnnxLowerOptions o;
  o.opset = 12;
  CHECK_THROWS_WITH(lower_to_onnx(*g, reader(*g), input_of(spec), o), Contains("opset 12"));
  o.opset = 18;
  CHECK_THROWS_WITH(lower_to_onnx(*g, reader(*g), input_of(spec), o), Contains("opset 18"));
  o.opset = 17;
  o.batch = -1;
  CHECK_THROWS_WITH(lower_to_onnx(*g, reader(*g), input_of(spec), o), Contains("batch -1"));
}

TEST_CASE("a layer named like a tensor the export adds is an error, not a model with one name for two values",
          "[cpu]") {
  const ModelSpec spec = parse_model_text(
      "name: clash\ninput: {channels: 1, height: 4, width: 4}\nclasses: [a, b]\nlayers:\n"
      "  - {name: normalized, type: conv2d, filters: 2, kernel: 1}\n"
      "  - {name: fc, type: dense, units: 2}\n"
      "data: {format: synthetic}\n",
      "clash.yaml");
  const auto g = Graph::build(spec);
  REQUIRE_THROWS_WITH(lower_to_onnx(*g, reader(*g), input_of(spec), OnnxLowerOptions{}),
                      Contains("two values would be named 'normalized'"));
}
