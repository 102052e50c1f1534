// The conv2d layer's `algo:` key: auto, one name for every direction, or a per-direction map;
// names checked when the graph is built, errors located at the key with a suggestion.
#include "config/model_spec.h"
#include "core/error.h"
#include "graph/graph.h"
#include "layers/conv_plan.h"
#include "support/catch.h"

using namespace cnn;

static std::string model(const std::string& conv_extra) {
  return "name: t\n"
         "input: {channels: 2, height: 6, width: 6}\n"
         "layers:\n"
         "  - {name: c1, type: conv2d, filters: 3, kernel: 3" + conv_extra + "}\n"
         "  - {name: fc, type: dense, units: 4}\n";
}

static std::string build_error(const std::string& conv_extra) {
  try {
    ModelSpec spec = parse_model_text(model(conv_extra), "m.yaml");
    Graph::build(spec);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

static ConvPlan plan_of(const std::string& conv_extra) {
  ModelSpec spec = parse_model_text(model(conv_extra), "m.yaml");
  auto g = Graph::build(spec);
  ConvPlanned* planned = g->node(0).layer->conv_planned();
  REQUIRE(planned != nullptr);
  return planned->conv_plan();
}

TEST_CASE("conv2d layers answer conv_planned with their plan, other layers with null", "[cpu]") {
  ModelSpec spec = parse_model_text(model(", algo: cpu:im2col_gemm"), "m.yaml");
  auto g = Graph::build(spec);
  Layer& conv = *g->node(0).layer;
  const Layer& dense = *g->node(1).layer;
  REQUIRE(conv.conv_planned() != nullptr);
  CHECK(conv.conv_planned() == dynamic_cast<ConvPlanned*>(&conv));
  CHECK(static_cast<const Layer&>(conv).conv_planned() == conv.conv_planned());
  CHECK(conv.conv_planned()->conv_plan().request(ConvDir::forward) == "cpu:im2col_gemm");
  CHECK(conv.conv_planned()->conv_shape(5).N == 5);
  CHECK(dense.conv_planned() == nullptr);
  CHECK(g->node(1).layer->conv_planned() == nullptr);
}

TEST_CASE("conv2d algo defaults to auto and one name applies to every direction", "[cpu]") {
  CHECK(plan_of("").requested == std::array<std::string, 3>{"auto", "auto", "auto"});
  ConvPlan p = plan_of(", algo: cpu:im2col_gemm");
  for (ConvDir d : kConvDirs) CHECK(p.request(d) == "cpu:im2col_gemm");
  p = plan_of(", algo: {backward_data: cpu:im2col_gemm}");
  CHECK(p.request(ConvDir::forward) == "auto");
  CHECK(p.request(ConvDir::backward_data) == "cpu:im2col_gemm");
  CHECK(p.request(ConvDir::backward_filter) == "auto");
}

TEST_CASE("conv2d algo with an unknown name is a config error at the key with a suggestion", "[cpu]") {
  const std::string e = build_error(", algo: cpu:im2col_gem");
  CHECK(e.find("m.yaml:4") != std::string::npos);
  CHECK(e.find("unknown forward convolution algorithm 'cpu:im2col_gem'") != std::string::npos);
  CHECK(e.find("did you mean 'cpu:im2col_gemm'") != std::string::npos);
}

TEST_CASE("conv2d algo with an unknown name lists each valid name once, though rows exist per dtype", "[cpu]") {
  const std::string e = build_error(", algo: {backward_data: nope}");
  auto count = [&e](const std::string& name) {
    size_t n = 0;
    for (size_t at = e.find(name); at != std::string::npos; at = e.find(name, at + 1)) ++n;
    return n;
  };
  CHECK(count("cpu:im2col_gemm") == 1);
  CHECK(count("cudnn:algo_1") <= 1);  // listed in f32 and bf16 in a CUDA build; absent without one
}

TEST_CASE("conv2d algo map with an unknown direction key or name names the key", "[cpu]") {
  std::string e = build_error(", algo: {fowrard: auto}");
  CHECK(e.find("fowrard") != std::string::npos);
  CHECK(e.find("did you mean 'forward'") != std::string::npos);
  e = build_error(", algo: {backward_filter: nope}");
  CHECK(e.find("layers[0].algo.backward_filter") != std::string::npos);
  CHECK(e.find("unknown backward_filter convolution algorithm 'nope'") != std::string::npos);
}

TEST_CASE("conv2d algo of another backend than the layer's backend is a config error", "[cpu]") {
  const std::string e = build_error(", backend: cuda, algo: cpu:im2col_gemm");
  CHECK(e.find("runs on backend cpu, but the layer asks for backend: cuda") != std::string::npos);
}
