// Sizes that do not fit (issue 16): each is a ConfigError at the layer or key that caused it,
// found when the graph is built (what `cnn-train validate` does), never a wrapped number.
#include <string>

#include "config/model_spec.h"
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

// The ConfigError of building `yaml` ("<no error>" when it builds).
ConfigError build_error(const std::string& yaml) {
  try {
    ModelSpec spec = parse_model_text(yaml, "t.yaml");
    auto g = Graph::build(spec);
    // What validate prints: the table computes every count and byte size.
    format_model_table(*g, spec, spec.train.batch_size);
  } catch (const ConfigError& e) {
    return e;
  }
  return ConfigError({}, "", "<no error>");
}

const char* kSmallInput = "{channels: 1, height: 8, width: 8}";
const char* kHead = "  - {name: g, type: global_avgpool}\n  - {name: fc, type: dense, units: 2}\n";

}  // namespace

TEST_CASE("conv2d 'same' padding whose dilated kernel overflows is a config error at the layer", "[cpu]") {
  // Issue 16, crash 1: validate said ok, training wrote past a heap buffer in im2col. A kernel of
  // 2^62 + 1 is refused by the schema's per-dimension cap, at the key.
  const ConfigError e = build_error(model(kSmallInput,
                                          "  - {name: c1, type: conv2d, filters: 2, kernel: 4611686018427387905, "
                                          "padding: same, dilation: 3}\n" +
                                              std::string(kHead)));
  INFO(e.what());
  CHECK(e.key_path() == "layers[0].kernel");
  CHECK(e.where().line == 4);
  CHECK_THAT(e.message(), Catch::Matchers::Contains("4611686018427387905"));
  // Kernel and dilation within their caps: the dilated kernel (2^40) and its 'same' padding are
  // computed checked, and the weights pass the per-tensor cap: an error at the layer.
  const ConfigError big = build_error(model(kSmallInput,
                                            "  - {name: c1, type: conv2d, filters: 2, kernel: 1048576, "
                                            "padding: same, dilation: 1048576}\n" +
                                                std::string(kHead)));
  INFO(big.what());
  CHECK(big.key_path() == "layers[0]");
  CHECK_THAT(big.message(), Catch::Matchers::Contains("layer 'c1'"));
  CHECK_THAT(big.message(), Catch::Matchers::Contains("does not fit"));
}

TEST_CASE("an input whose element count overflows or passes the cap is a config error at input", "[cpu]") {
  // Issue 16, crash 2: 2^32 x 2^32 wrapped to 0 elements; validate said ok, training segfaulted.
  // A dimension that large is refused by the schema's per-dimension cap, at the key.
  const ConfigError e = build_error(model("{channels: 1, height: " + k2p32 + ", width: " + k2p32 + "}", kHead));
  INFO(e.what());
  CHECK(e.key_path() == "input.height");
  CHECK(e.where().line == 2);
  CHECK_THAT(e.message(), Catch::Matchers::Contains("4294967296"));
  CHECK_THAT(e.message(), Catch::Matchers::Contains("1048576"));
  // Dimensions within their cap whose product passes the per-tensor cap: refused at input.
  const ConfigError over = build_error(model("{channels: 2, height: 32768, width: 32769}", kHead));
  INFO(over.what());
  CHECK(over.key_path() == "input");
  CHECK(over.where().line == 2);
  // The input and the layers (below) word the cap alike: core's tensor_cap_message.
  CHECK(over.message() ==
        "the input per image (channels 2, height 32768, width 32769) would have 2147549184 elements, over the "
        "per-tensor cap of 2147483648 (2^31) elements");
}

TEST_CASE("stride, padding and dilation beyond an int are errors, not narrowed", "[cpu]") {
  // Stride 2^32 + 1 and padding 2^32 were cast to int: 1 and 0, and the model trained.
  struct Case {
    std::string layer, expect;
  };
  const std::string big = std::to_string((int64_t{1} << 32) + 1);
  for (const Case& c : {Case{"{name: c1, type: conv2d, filters: 2, kernel: 3, stride: " + big + "}", "stride " + big},
                        Case{"{name: c1, type: conv2d, filters: 2, kernel: 1, padding: " + k2p32 + "}",
                             "padding " + k2p32},
                        Case{"{name: c1, type: conv2d, filters: 2, kernel: 1, dilation: " + k2p32 + "}",
                             "dilation " + k2p32},
                        Case{"{name: p1, type: maxpool, kernel: 2, stride: " + big + "}", "stride " + big},
                        Case{"{name: p1, type: avgpool, stride: 1, kernel: 2, padding: " + k2p32 + "}",
                             "padding " + k2p32}}) {
    // Refused at the key by the schema's cap, never narrowed to an int.
    const ConfigError e = build_error(model(kSmallInput, "  - " + c.layer + "\n" + kHead));
    INFO(c.layer << "\n" << e.what());
    CHECK(e.key_path() == "layers[0]." + c.expect.substr(0, c.expect.find(' ')));
    CHECK_THAT(e.message(), Catch::Matchers::Contains(c.expect.substr(c.expect.find(' ') + 1)));
    CHECK_THAT(e.message(), Catch::Matchers::Contains("expected an integer in"));
  }
}

TEST_CASE("filters or units too large for a tensor are config errors, not negative parameter counts", "[cpu]") {
  // filters 2^63-1 printed negative parameter counts and "ok": now refused by the schema at the key.
  const ConfigError conv = build_error(
      model(kSmallInput, "  - {name: c1, type: conv2d, filters: 9223372036854775807, kernel: 1}\n" + std::string(kHead)));
  INFO(conv.what());
  CHECK(conv.key_path() == "layers[0].filters");
  CHECK_THAT(conv.message(), Catch::Matchers::Contains("9223372036854775807"));
  // Filters within the key's cap whose weights pass the per-tensor cap: 2^20 x 2^12 channels.
  const ConfigError weights4d = build_error(model("{channels: 4096, height: 1, width: 1}",
                                                  "  - {name: c1, type: conv2d, filters: 1048576, kernel: 1}\n" +
                                                      std::string(kHead)));
  INFO(weights4d.what());
  CHECK(weights4d.key_path() == "layers[0]");
  CHECK_THAT(weights4d.message(), Catch::Matchers::Contains("layer 'c1'"));
  CHECK_THAT(weights4d.message(), Catch::Matchers::Contains("per-tensor cap"));
  // A dense layer's units of 2^62: no 2^62 class names are made, the key is refused.
  const ConfigError units = build_error(model(kSmallInput, "  - {name: fc, type: dense, units: 4611686018427387904}\n"));
  INFO(units.what());
  CHECK(units.key_path() == "layers[0].units");
  CHECK_THAT(units.message(), Catch::Matchers::Contains("4611686018427387904"));
  // Weights over the cap with a small output: 2^21 inputs times 2^11 units.
  const ConfigError weights = build_error(model("{channels: 2, height: 1024, width: 1024}",
                                                "  - {name: f, type: flatten}\n  - {name: fc, type: dense, units: 2048}\n"));
  INFO(weights.what());
  CHECK(weights.message() ==
        "layer 'fc' (dense): the parameter 'weight' [2048, 2097152] would have 4294967296 elements, over the "
        "per-tensor cap of 2147483648 (2^31) elements");
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
  // 2 * padding overflowed in the crop-size bound (issue 16: UBSan in model_spec.cpp).
  auto crop_error = [](const std::string& padding) {
    try {
      parse_model_text(model(kSmallInput, kHead) + "data:\n  augment: {random_crop: {size: 8, padding: " + padding +
                           "}}\n",
                       "t.yaml");
    } catch (const ConfigError& e) {
      return e;
    }
    return ConfigError({}, "", "<no error>");
  };
  const ConfigError huge = crop_error("4611686018427387904");  // past the key's own cap
  INFO(huge.what());
  CHECK(huge.key_path() == "data.augment.random_crop.padding");
  CHECK_THAT(huge.message(), Catch::Matchers::Contains("1048576"));
  const ConfigError over = crop_error("1048576");  // within it, but (2^21 + 8)^2 pixels pass the tensor cap
  INFO(over.what());
  CHECK(over.key_path() == "data.augment.random_crop.padding");
  CHECK_THAT(over.message(), Catch::Matchers::Contains("per-tensor cap"));
  CHECK(crop_error("4").message() == "<no error>");
}
