// Sizes that do not fit (issue 16): each is a ConfigError at the layer or key that caused it,
// found when the graph is built (what `cnn-train validate` does), never a wrapped number.
#include <functional>
#include <limits>
#include <string>

#include "config/model_spec.h"
#include "config/value.h"
#include "core/checked.h"
#include "core/error.h"
#include "graph/graph.h"
#include "graph/memory_plan.h"
#include "graph/summary.h"
#include "support/catch.h"

using namespace cnn;

namespace {

const std::string k2p32 = std::to_string(int64_t{1} << 32);

std::string model(const std::string& input, const std::string& layers) {
  return "name: t\ninput: " + input + "\nlayers:\n" + layers;
}

// The ConfigError of building `spec` ("<no error>" when it builds).
ConfigError build_error(const std::function<ModelSpec()>& make_spec) {
  try {
    ModelSpec spec = make_spec();
    auto g = Graph::build(spec);
    // What validate prints: the table computes every count and byte size.
    format_model_table(*g, spec, spec.train.batch_size);
  } catch (const ConfigError& e) {
    return e;
  }
  return ConfigError({}, "", "<no error>");
}

ConfigError build_error(const std::string& yaml) {
  return build_error([&] { return parse_model_text(yaml, "t.yaml"); });
}

// Trap: the model file's schema holds every size key to [.., kMaxDimension] (2^20), so the issue's
// values are refused at their key before a graph is built. To test the graph's own checked
// arithmetic (what stands when a key's range is too wide or forgotten), these set a value after
// parsing, past the schema.
ConfigError build_error_with_attr(const std::string& yaml, const std::string& key, int64_t value) {
  return build_error([&] {
    ModelSpec spec = parse_model_text(yaml, "t.yaml");
    Value& attrs = spec.layers.at(0).attrs;
    const Value* old = attrs.find(key);
    REQUIRE(old);
    const Location where = old->where();
    attrs.set(key, Value::scalar(Value::Kind::integer, std::to_string(value), where))
        .set_path_recursive("layers[0]." + key);
    return spec;
  });
}

ConfigError build_error_with_input(const std::string& yaml, int64_t height, int64_t width) {
  return build_error([&] {
    ModelSpec spec = parse_model_text(yaml, "t.yaml");
    spec.input.height = height;
    spec.input.width = width;
    return spec;
  });
}

// A ConfigError at `key_path` that says the value is out of the key's range.
void check_refused_at_key(const ConfigError& e, const std::string& key_path, const std::string& value) {
  INFO(e.what());
  CHECK(e.key_path() == key_path);
  CHECK_THAT(e.message(), Catch::Matchers::Contains("expected an integer in ["));
  CHECK_THAT(e.message(), Catch::Matchers::Contains("found the number " + value));
}

const char* kSmallInput = "{channels: 1, height: 8, width: 8}";
const char* kHead = "  - {name: g, type: global_avgpool}\n  - {name: fc, type: dense, units: 2}\n";

}  // namespace

TEST_CASE("conv2d 'same' padding whose dilated kernel overflows is a config error at the layer", "[cpu]") {
  // Issue 16, crash 1: validate said ok, training wrote past a heap buffer in im2col.
  const std::string yaml = model(kSmallInput, "  - {name: c1, type: conv2d, filters: 2, kernel: 4611686018427387905, "
                                              "padding: same, dilation: 3}\n" + std::string(kHead));
  check_refused_at_key(build_error(yaml), "layers[0].kernel", "4611686018427387905");
  const ConfigError e = build_error_with_attr(
      model(kSmallInput, "  - {name: c1, type: conv2d, filters: 2, kernel: 3, padding: same, dilation: 3}\n" +
                             std::string(kHead)),
      "kernel", 4611686018427387905);
  INFO(e.what());
  CHECK(e.key_path() == "layers[0]");
  CHECK(e.where().line == 4);
  CHECK_THAT(e.message(), Catch::Matchers::Contains("layer 'c1'"));
  CHECK_THAT(e.message(), Catch::Matchers::Contains("kernel 4611686018427387905"));
  CHECK_THAT(e.message(), Catch::Matchers::Contains("does not fit"));
}

TEST_CASE("an input whose element count overflows or passes the cap is a config error at input", "[cpu]") {
  // Issue 16, crash 2: 2^32 x 2^32 wrapped to 0 elements; validate said ok, training segfaulted.
  check_refused_at_key(build_error(model("{channels: 1, height: " + k2p32 + ", width: " + k2p32 + "}", kHead)),
                       "input.height", k2p32);
  const ConfigError e = build_error_with_input(model(kSmallInput, kHead), int64_t{1} << 32, int64_t{1} << 32);
  INFO(e.what());
  CHECK(e.key_path() == "input");
  CHECK(e.where().line == 2);
  CHECK_THAT(e.message(), Catch::Matchers::Contains("height 4294967296"));
  CHECK_THAT(e.message(), Catch::Matchers::Contains("per-tensor cap"));
  // Within every key's range, over the cap: 2^20 x 2^20 pixels, and just over it.
  const ConfigError widest = build_error(model("{channels: 1, height: 1048576, width: 1048576}", kHead));
  CHECK(widest.key_path() == "input");
  CHECK_THAT(widest.message(), Catch::Matchers::Contains("1099511627776 elements, over the per-tensor cap"));
  const ConfigError over = build_error(model("{channels: 2, height: 32768, width: 32769}", kHead));
  CHECK_THAT(over.message(), Catch::Matchers::Contains("2147549184 elements"));
}

TEST_CASE("stride, padding and dilation beyond an int are errors, not narrowed", "[cpu]") {
  // Stride 2^32 + 1 and padding 2^32 were cast to int: 1 and 0, and the model trained.
  // The model file refuses them at the key; past the schema, the layer refuses them too.
  struct Case {
    std::string layer, key;
    int64_t value;
  };
  const int64_t big = (int64_t{1} << 32) + 1, p32 = int64_t{1} << 32;
  for (const Case& c : {Case{"{name: c1, type: conv2d, filters: 2, kernel: 3", "stride", big},
                        Case{"{name: c1, type: conv2d, filters: 2, kernel: 1", "padding", p32},
                        Case{"{name: c1, type: conv2d, filters: 2, kernel: 1", "dilation", p32},
                        Case{"{name: p1, type: maxpool, kernel: 2", "stride", big},
                        Case{"{name: p1, type: avgpool, stride: 1, kernel: 2", "padding", p32}}) {
    const std::string value = std::to_string(c.value);
    INFO(c.layer << ", " << c.key << ": " << value << "}");
    check_refused_at_key(build_error(model(kSmallInput, "  - " + c.layer + ", " + c.key + ": " + value + "}\n" + kHead)),
                         "layers[0]." + c.key, value);
    const ConfigError e = build_error_with_attr(model(kSmallInput, "  - " + c.layer + "}\n" + kHead), c.key, c.value);
    INFO(e.what());
    CHECK(e.key_path() == "layers[0]");
    CHECK_THAT(e.message(), Catch::Matchers::Contains(c.key + " " + value));
    CHECK_THAT(e.message(), Catch::Matchers::Contains("out of range"));
  }
}

TEST_CASE("filters or units too large for a tensor are config errors, not negative parameter counts", "[cpu]") {
  // filters 2^63-1 printed negative parameter counts and "ok".
  check_refused_at_key(build_error(model(kSmallInput, "  - {name: c1, type: conv2d, filters: 9223372036854775807, "
                                                      "kernel: 1}\n" + std::string(kHead))),
                       "layers[0].filters", "9223372036854775807");
  const std::string conv_layer = "  - {name: c1, type: conv2d, filters: 2, kernel: 1}\n" + std::string(kHead);
  const ConfigError conv =
      build_error_with_attr(model(kSmallInput, conv_layer), "filters", std::numeric_limits<int64_t>::max());
  INFO(conv.what());
  CHECK(conv.key_path() == "layers[0]");
  CHECK_THAT(conv.message(), Catch::Matchers::Contains("layer 'c1'"));
  CHECK_THAT(conv.message(), Catch::Matchers::Contains("per-tensor cap"));
  // Within the keys' ranges, over the cap: 2^20 filters of 4096 channels.
  const ConfigError wide = build_error(model("{channels: 4096, height: 1, width: 1}",
                                             "  - {name: c1, type: conv2d, filters: 1048576, kernel: 1}\n" +
                                                 std::string(kHead)));
  INFO(wide.what());
  CHECK(wide.key_path() == "layers[0]");
  CHECK_THAT(wide.message(), Catch::Matchers::Contains("4294967296 elements, over the per-tensor cap"));
  // A dense layer's output over the cap: no 2^62 class names are made.
  check_refused_at_key(build_error(model(kSmallInput, "  - {name: fc, type: dense, units: 4611686018427387904}\n")),
                       "layers[0].units", "4611686018427387904");
  const ConfigError units =
      build_error_with_attr(model(kSmallInput, "  - {name: fc, type: dense, units: 2}\n"), "units", int64_t{1} << 62);
  INFO(units.what());
  CHECK(units.key_path() == "layers.fc");
  CHECK_THAT(units.message(), Catch::Matchers::Contains("the output per image [4611686018427387904]"));
  // Weights over the cap with a small output: 2^21 inputs times 2^11 units.
  const ConfigError weights = build_error(model("{channels: 2, height: 1024, width: 1024}",
                                                "  - {name: f, type: flatten}\n  - {name: fc, type: dense, units: 2048}\n"));
  INFO(weights.what());
  CHECK_THAT(weights.message(), Catch::Matchers::Contains("the parameter 'weight' [2048, 2097152]"));
}

TEST_CASE("the final layer may output at most kMaxClasses class scores", "[cpu]") {
  const std::string at_cap = std::to_string(Graph::kMaxClasses), over = std::to_string(Graph::kMaxClasses + 1);
  CHECK(build_error(model(kSmallInput, "  - {name: fc, type: dense, units: " + at_cap + "}\n")).message() ==
        "<no error>");
  const ConfigError e = build_error(model(kSmallInput, "  - {name: fc, type: dense, units: " + over + "}\n"));
  CHECK(e.key_path() == "layers.fc");
  CHECK_THAT(e.message(), Catch::Matchers::Contains("outputs " + over + " class scores"));
}

TEST_CASE("a batch that takes an activation over the cap is a config error naming the layer and batch", "[cpu]") {
  ModelSpec spec = parse_model_text(model(kSmallInput, "  - {name: c1, type: conv2d, filters: 64, kernel: 1}\n" +
                                                           std::string(kHead)),
                                    "t.yaml");
  auto g = Graph::build(spec);
  // (64, 8, 8) = 4096 per image: 2^19 images make 2^31 (at the cap), one more is over it.
  CHECK_NOTHROW(plan_memory(*g, int64_t{1} << 19, true));
  try {
    plan_memory(*g, (int64_t{1} << 19) + 1, true);
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.key_path() == "layers.c1");
    CHECK_THAT(e.message(), Catch::Matchers::Contains("at batch 524289"));
    CHECK_THAT(e.message(), Catch::Matchers::Contains("batch size"));
  }
  // A batch whose product with the input overflows 64 bits.
  CHECK_THROWS_AS(plan_memory(*g, int64_t{1} << 60, true), ConfigError);
  CHECK_THROWS_AS(estimate_training_memory(*g, spec, int64_t{1} << 60), ConfigError);
}

TEST_CASE("random_crop padding that takes the padded image past the cap is a config error at the key", "[cpu]") {
  // 2 * padding overflowed in the crop-size bound (issue 16: UBSan in model_spec.cpp); the key's
  // range refuses the value, and a padding within it (2^20 on 8x8) is held to the cap.
  const auto crop_error = [](const std::string& padding) {
    return build_error(model(kSmallInput, kHead) + "data:\n  augment: {random_crop: {size: 8, padding: " + padding +
                       "}}\n");
  };
  check_refused_at_key(crop_error("4611686018427387904"), "data.augment.random_crop.padding", "4611686018427387904");
  const ConfigError e = crop_error("1048576");
  INFO(e.what());
  CHECK(e.key_path() == "data.augment.random_crop.padding");
  CHECK_THAT(e.message(), Catch::Matchers::Contains("per-tensor cap"));
}
