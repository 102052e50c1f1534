// Graph builder: wiring by name, topological order, located errors, parameter layout, and the
// parameter counts of the bundled models.
#include "config/model_spec.h"
#include "core/error.h"
#include "graph/graph.h"
#include "support/catch.h"

using namespace cnn;

static const char* kHeader =
    "name: t\n"
    "input: {channels: 2, height: 6, width: 6}\n"
    "layers:\n";

static std::unique_ptr<Graph> build(const std::string& layers_yaml, ModelSpec& spec) {
  spec = parse_model_text(std::string(kHeader) + layers_yaml, "t.yaml");
  return Graph::build(spec);
}

static std::string build_error(const std::string& layers_yaml) {
  ModelSpec spec;
  try {
    build(layers_yaml, spec);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST_CASE("graph wires layers by name and orders them topologically", "[cpu]") {
  ModelSpec spec;
  auto g = build(
      "  - {name: a, type: conv2d, filters: 3, kernel: 3, padding: 1}\n"
      "  - {name: c, type: add, inputs: [a, b]}\n"
      "  - {name: b, type: relu, inputs: [a]}\n"
      "  - {name: f, type: flatten, inputs: [c]}\n"
      "  - {name: fc, type: dense, units: 4}\n",
      spec);
  REQUIRE(g->size() == 5);
  std::vector<std::string> order;
  for (int i = 0; i < g->size(); ++i) order.push_back(g->node(i).layer->name());
  CHECK(order == std::vector<std::string>{"a", "b", "c", "f", "fc"});
  CHECK(g->node(2).inputs == std::vector<int>{0, 1});
  CHECK(g->node(0).consumers == std::vector<int>{1, 2});
  CHECK(g->output_shape() == Shape{4});
  CHECK(g->node(3).out_shape == Shape{3 * 6 * 6});
}

TEST_CASE("graph lays parameters out flat with PyTorch names and shapes", "[cpu]") {
  ModelSpec spec;
  auto g = build(
      "  - {name: conv1, type: conv2d, filters: 5, kernel: [3, 1], groups: 1}\n"
      "  - {name: bn1, type: batchnorm}\n"
      "  - {name: gap, type: global_avgpool}\n"
      "  - {name: fc, type: dense, units: 3, bias: false}\n",
      spec);
  std::vector<std::string> names;
  for (const auto& p : g->params()) names.push_back(p.name);
  CHECK(names == std::vector<std::string>{"conv1.weight", "conv1.bias", "bn1.weight", "bn1.bias", "bn1.running_mean",
                                          "bn1.running_var", "fc.weight"});
  CHECK(g->params()[0].shape == Shape{5, 2, 3, 1});
  CHECK(g->params()[6].shape == Shape{3, 5});
  CHECK_FALSE(g->params()[4].trainable);
  for (const auto& p : g->params()) CHECK(p.offset % Graph::kAlign == 0);
  CHECK(g->trainable_count() == 5 * 2 * 3 + 5 + 5 + 5 + 15);
  CHECK(g->buffer_count() == 10);
  // Offsets don't overlap within each flat buffer.
  CHECK(g->params()[1].offset >= g->params()[0].offset + 30);
  CHECK(g->params()[5].offset >= g->params()[4].offset + 5);
}

TEST_CASE("graph rejects a cycle naming the layers in it", "[cpu]") {
  std::string e = build_error(
      "  - {name: a, type: relu, inputs: [c]}\n"
      "  - {name: b, type: relu, inputs: [a]}\n"
      "  - {name: c, type: relu, inputs: [b]}\n"
      "  - {name: f, type: flatten, inputs: [input]}\n");
  CHECK_THAT(e, Catch::Matchers::Contains("cycle: a, b, c"));
  CHECK_THAT(e, Catch::Matchers::Contains("t.yaml:4:"));
}

TEST_CASE("graph rejects an unknown input name with a suggestion", "[cpu]") {
  std::string e = build_error(
      "  - {name: conv1, type: conv2d, filters: 2, kernel: 3}\n"
      "  - {name: relu1, type: relu, inputs: [conv]}\n"
      "  - {name: f, type: flatten}\n");
  CHECK_THAT(e, Catch::Matchers::Contains("t.yaml:5:"));
  CHECK_THAT(e, Catch::Matchers::Contains("input 'conv', which does not exist, did you mean 'conv1'?"));
}

TEST_CASE("graph rejects an unknown layer type listing the known ones", "[cpu]") {
  std::string e = build_error("  - {name: c, type: conv2, filters: 2, kernel: 3}\n  - {name: f, type: flatten}\n");
  CHECK_THAT(e, Catch::Matchers::Contains("unknown layer type 'conv2', did you mean 'conv2d'?"));
  CHECK_THAT(e, Catch::Matchers::Contains("known types: "));
  CHECK_THAT(e, Catch::Matchers::Contains("global_avgpool"));
  CHECK_THAT(e, Catch::Matchers::Contains("t.yaml:4:"));
}

TEST_CASE("graph rejects an unknown layer key at its line and column", "[cpu]") {
  std::string e = build_error(
      "  - name: c\n"
      "    type: conv2d\n"
      "    filters: 2\n"
      "    kernal: 3\n"
      "    kernel: 3\n"
      "  - {name: f, type: flatten}\n");
  CHECK_THAT(e, Catch::Matchers::Contains("t.yaml:7:5"));
  CHECK_THAT(e, Catch::Matchers::Contains("unknown key 'kernal', did you mean 'kernel'?"));
}

TEST_CASE("graph rejects a missing required layer key", "[cpu]") {
  std::string e = build_error("  - {name: c, type: conv2d, kernel: 3}\n  - {name: f, type: flatten}\n");
  CHECK_THAT(e, Catch::Matchers::Contains("missing required key 'filters'"));
}

TEST_CASE("graph rejects shapes that don't fit", "[cpu]") {
  SECTION("add of different shapes") {
    std::string e = build_error(
        "  - {name: a, type: conv2d, filters: 3, kernel: 3}\n"
        "  - {name: b, type: conv2d, filters: 3, kernel: 1, inputs: [input]}\n"
        "  - {name: s, type: add, inputs: [a, b]}\n"
        "  - {name: f, type: flatten}\n");
    CHECK_THAT(e, Catch::Matchers::Contains("layer 's' (add): input 1 has shape [3, 6, 6] but input 0 has [3, 4, 4]"));
    CHECK_THAT(e, Catch::Matchers::Contains("t.yaml:6:"));
  }
  SECTION("groups that don't divide the channels") {
    std::string e = build_error("  - {name: a, type: conv2d, filters: 4, kernel: 3, groups: 4}\n  - {name: f, type: flatten}\n");
    CHECK_THAT(e, Catch::Matchers::Contains("input has 2 channels, not divisible by groups 4"));
  }
  SECTION("a kernel larger than the input") {
    std::string e = build_error("  - {name: a, type: conv2d, filters: 4, kernel: 9}\n  - {name: f, type: flatten}\n");
    CHECK_THAT(e, Catch::Matchers::Contains("layer 'a' (conv2d): input [2, 6, 6] does not fit"));
  }
  SECTION("a final layer that is not a vector") {
    std::string e = build_error("  - {name: a, type: conv2d, filters: 4, kernel: 3}\n");
    CHECK_THAT(e, Catch::Matchers::Contains("the final layer 'a' outputs [4, 4, 4], expected a vector"));
  }
  SECTION("a dangling layer output") {
    std::string e = build_error(
        "  - {name: a, type: relu}\n"
        "  - {name: b, type: relu, inputs: [input]}\n"
        "  - {name: f, type: flatten}\n");
    CHECK_THAT(e, Catch::Matchers::Contains("the output of layer 'a' is never used"));
  }
}

TEST_CASE("graph checks the class count against the final layer", "[cpu]") {
  ModelSpec spec;
  std::string text = std::string(kHeader) + "  - {name: f, type: flatten}\n  - {name: fc, type: dense, units: 3}\n" +
                     "classes: [a, b]\n";
  spec = parse_model_text(text, "t.yaml");
  CHECK_THROWS_WITH(Graph::build(spec), Catch::Matchers::Contains("outputs 3 class scores but `classes` names 2"));
}

static ModelSpec load_model(const std::string& name) {
  return load_model_spec(std::string(CNN_SOURCE_DIR) + "/models/" + name + ".yaml");
}

TEST_CASE("bundled models have their documented parameter counts", "[cpu]") {
  {
    ModelSpec s = load_model("mini_xception");
    auto g = Graph::build(s);
    CHECK(g->trainable_count() == 56951);
    CHECK(g->trainable_count() + g->buffer_count() == 58423);  // Keras' count in the paper's code
  }
  {
    ModelSpec s = load_model("vgg_fer");
    auto g = Graph::build(s);
    CHECK(g->trainable_count() == 29890759);
    CHECK(g->input_shape() == Shape{1, 40, 40});
  }
  {
    ModelSpec s = load_model("fashion_cnn");
    auto g = Graph::build(s);
    CHECK(g->trainable_count() == 870826);
  }
}

TEST_CASE("graph points at a misspelt required layer key", "[cpu]") {
  std::string e = build_error(
      "  - name: c\n"
      "    type: conv2d\n"
      "    filters: 2\n"
      "    kernal: 3\n"
      "  - {name: f, type: flatten}\n");
  CHECK_THAT(e, Catch::Matchers::Contains("t.yaml:7:5"));
  CHECK_THAT(e, Catch::Matchers::Contains("missing required key 'kernel'; found unknown key 'kernal', did you mean 'kernel'?"));
}
