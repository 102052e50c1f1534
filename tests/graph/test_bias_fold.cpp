// Conv bias folding (Graph::fold_conv_biases, train.fold_conv_bias): which conv2d layers fold their
// bias into the batchnorm after them (a bias, that batchnorm the only reader, a precision other
// than fp32 after the layer's own override, a batchnorm not asking for cudnn), what the graph
// notes say, and the shapes the folded conv runs: forward without its bias, backward_filter with
// it (db as before). Numbers with fold on and off: tests/train/test_bias_fold_step.cpp.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "layers/conv_plan.h"
#include "support/catch.h"

using namespace cnn;

namespace {

// c1 -> b1: folded. c2: no bias. c3: read by a relu. c4: read by b4 and by the add. c5: its own
// precision (PRECISION5). b6: asks for backend B6.
const char* kCases =
    "name: fold_cases\n"
    "input: {channels: 2, height: 6, width: 6}\n"
    "layers:\n"
    "  - {name: c1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
    "  - {name: b1, type: batchnorm}\n"
    "  - {name: r1, type: relu}\n"
    "  - {name: c2, type: conv2d, filters: 4, kernel: 3, padding: 1, bias: false}\n"
    "  - {name: b2, type: batchnorm}\n"
    "  - {name: c3, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
    "  - {name: r3, type: relu}\n"
    "  - {name: c4, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
    "  - {name: b4, type: batchnorm}\n"
    "  - {name: sum, type: add, inputs: [b4, c4]}\n"
    "  - {name: c5, type: conv2d, filters: 4, kernel: 3, padding: 1, precision: PRECISION5}\n"
    "  - {name: b5, type: batchnorm}\n"
    "  - {name: c6, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
    "  - {name: b6, type: batchnorm, backend: B6}\n"
    "  - {name: fc, type: dense, units: 3}\n";

std::unique_ptr<Graph> build(const std::string& precision5, const std::string& b6,
                             const std::vector<std::string>& overrides) {
  std::string yaml = kCases;
  yaml.replace(yaml.find("PRECISION5"), 10, precision5);
  yaml.replace(yaml.find("B6"), 2, b6);
  return Graph::build(parse_model_text(yaml, "fold.yaml", overrides));
}

const ConvPlanned& conv(const Graph& g, int node) {
  const ConvPlanned* p = g.node(node).layer->conv_planned();
  REQUIRE(p);
  return *p;
}

}  // namespace

TEST_CASE("conv bias folding takes only a biased conv2d read by one batchnorm alone, in a 16-bit or tf32 precision",
          "[cpu]") {
  for (const char* precision : {"bf16", "fp16", "tf32"}) {
    INFO(precision);
    const auto g = build("fp32", "auto", {std::string("train.precision=") + precision});
    CHECK(g->folded_bias_pairs() == "c1 -> b1, c6 -> b6");
    CHECK(g->node(0).bias_folded_into == 1);
    for (int i : {3, 5, 7, 10}) CHECK(g->node(i).bias_folded_into == -1);
  }
  // c5's override to a folding precision folds it under an fp32 run; the rest stays as fp32 runs.
  CHECK(build("bf16", "auto", {})->folded_bias_pairs() == "c5 -> b5");
  CHECK(build("bf16", "auto", {"train.precision=bf16"})->folded_bias_pairs() == "c1 -> b1, c5 -> b5, c6 -> b6");
  // A batchnorm that asks for cuDNN (no mean offset there) keeps its conv's bias.
  CHECK(build("fp32", "cudnn", {"train.precision=bf16"})->folded_bias_pairs() == "c1 -> b1");
}

TEST_CASE("conv bias folding is off in fp32 and with train.fold_conv_bias false, and undone on request", "[cpu]") {
  const auto fp32 = build("fp32", "auto", {});
  CHECK(fp32->folded_bias_pairs().empty());
  CHECK(build("fp32", "auto", {"train.precision=bf16", "train.fold_conv_bias=false"})->folded_bias_pairs().empty());
  const auto g = build("fp32", "auto", {"train.precision=bf16"});
  CHECK(g->fold_conv_biases(false) == 0);
  CHECK(g->folded_bias_pairs().empty());
  CHECK(conv(*g, 0).conv_shape(4, ConvDir::forward).has_bias);
  CHECK(g->fold_conv_biases(true) == 2);
  // The tests' switch folds fp32 layers too (c5 among them).
  CHECK(fp32->fold_conv_biases(true, true) == 3);
  CHECK(fp32->folded_bias_pairs() == "c1 -> b1, c5 -> b5, c6 -> b6");
}

TEST_CASE("a folded conv runs bias-free in every direction and keeps its bias parameter", "[cpu]") {
  const auto g = build("fp32", "auto", {"train.precision=bf16"});
  const ConvPlanned& c1 = conv(*g, 0);
  for (ConvDir d : kConvDirs) {
    INFO(to_string(d));
    CHECK_FALSE(c1.conv_shape(4, d).has_bias);  // the folded bias's gradient is zero: no column sum
  }
  CHECK(c1.conv_shape(4).has_bias);  // the layer's shape (its parameters) keeps the bias
  CHECK(g->node(0).layer->folded_bias() == nullptr);  // nothing bound yet
  const ConvPlanned& c3 = conv(*g, 5);  // not folded
  for (ConvDir d : kConvDirs) CHECK(c3.conv_shape(4, d).has_bias);
}

TEST_CASE("the graph notes name the folded pairs", "[cpu]") {
  const auto g = build("fp32", "auto", {"train.precision=bf16"});
  const std::vector<std::string> notes = g->choose_backends(Device::cpu);
  const std::string line = "2 conv bias(es) folded into their batchnorms: c1 -> b1, c6 -> b6";
  CHECK(std::count(notes.begin(), notes.end(), line) == 1);
  const std::vector<std::string>& precision = g->precision_notes();
  CHECK(std::count(precision.begin(), precision.end(), line) == 1);
  const auto plain = build("fp32", "auto", {});
  for (const std::string& n : plain->choose_backends(Device::cpu)) CHECK(n.find("folded") == std::string::npos);
}

TEST_CASE("the model table says which conv's bias a batchnorm adds", "[cpu]") {
  ModelSpec spec = parse_model_text(
      "name: t\ninput: {channels: 2, height: 6, width: 6}\nlayers:\n"
      "  - {name: c1, type: conv2d, filters: 4, kernel: 3, padding: 1}\n"
      "  - {name: b1, type: batchnorm}\n"
      "  - {name: fc, type: dense, units: 3}\n",
      "t.yaml", {"train.precision=bf16"});
  const auto g = Graph::build(spec);
  CHECK(format_model_table(*g, spec, 4).find("bias folded into b1") != std::string::npos);
  spec = parse_model_text(to_yaml(spec.config), "t.yaml", {"train.fold_conv_bias=false"});
  CHECK(format_model_table(*Graph::build(spec), spec, 4).find("folded") == std::string::npos);
}
