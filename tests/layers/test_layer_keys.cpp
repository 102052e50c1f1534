// The layers' key declarations, checked by the config when a model is parsed: hostile sizes are
// refused by their declared ranges at the key (issue 16), every type's defaults land in the
// resolved config at parse time (so a resolved config compares equal to itself: issue 15's resume
// with the model file), and the reference lists every registered type.
#include <filesystem>
#include <string>

#include "config/model_spec.h"
#include "layers/registry.h"
#include "support/catch.h"

using namespace cnn;

namespace {

std::string model(const std::string& layers, const std::string& input = "{channels: 2, height: 8, width: 8}") {
  return "name: t\ninput: " + input + "\nlayers:\n" + layers;
}

std::string parse_error(const std::string& text) {
  try {
    parse_model_text(text, "m.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("hostile layer sizes are refused by their declared ranges at the key", "[cpu]") {
  // Each of these passed `validate` before and then wrapped, narrowed or allocated without bound.
  CHECK(parse_error(model("  - {name: c, type: conv2d, filters: 4, kernel: 4611686018427387905, padding: same, "
                          "dilation: 3}\n")) ==
        "m.yaml:4:49: 'layers[0].kernel': expected an integer in [1, 1048576] or a pair [h, w] of them, found the "
        "number 4611686018427387905");
  CHECK(parse_error(model("  - {name: c, type: conv2d, filters: 4, kernel: 3, stride: 4294967297}\n")) ==
        "m.yaml:4:60: 'layers[0].stride': expected an integer in [1, 1048576] or a pair [h, w] of them, found the "
        "number 4294967297");
  CHECK(parse_error(model("  - {name: c, type: conv2d, filters: 4, kernel: 3, padding: 4294967296}\n")) ==
        "m.yaml:4:61: 'layers[0].padding': expected an integer in [0, 1048576], a pair [h, w] of them or 'same', "
        "found the number 4294967296");
  CHECK(parse_error(model("  - {name: c, type: conv2d, filters: 9223372036854775807, kernel: 3}\n")) ==
        "m.yaml:4:38: 'layers[0].filters': expected an integer in [1, 1048576], found the number 9223372036854775807");
  CHECK(parse_error(model("  - {name: c, type: conv2d, filters: 4, kernel: [3, 2147483648]}\n")) ==
        "m.yaml:4:53: 'layers[0].kernel[1]': expected an integer in [1, 1048576], found the number 2147483648");
  // units: 2^62 would have built 2^62 class-name strings.
  CHECK(parse_error(model("  - {name: f, type: flatten}\n  - {name: fc, type: dense, units: 4611686018427387904}\n")) ==
        "m.yaml:5:36: 'layers[1].units': expected an integer in [1, 1048576], found the number 4611686018427387904");
  CHECK(parse_error(model("  - {name: p, type: maxpool, kernel: 2, stride: 0}\n")).find(
            "'layers[0].stride': expected an integer in [1, 1048576]") != std::string::npos);
  CHECK(parse_error(model("  - {name: b, type: batchnorm, eps: 0}\n")).find("'layers[0].eps': expected a number in (0, 1]") !=
        std::string::npos);
  CHECK(parse_error(model("  - {name: r, type: leaky_relu, alpha: 1e300}\n")).find(
            "'layers[0].alpha': expected a number in [-1000000, 1000000]") != std::string::npos);
  CHECK(parse_error(model("  - {name: d, type: dropout, p: 1}\n")).find("'layers[0].p': expected a number in [0, 1)") !=
        std::string::npos);
}

TEST_CASE("hostile input sizes and layer counts are refused", "[cpu]") {
  const std::string relu = "  - {name: r, type: relu}\n";
  CHECK(parse_error(model(relu, "{height: 4294967296, width: 4294967296}")) ==
        "m.yaml:2:17: 'input.height': expected an integer in [1, 1048576], found the number 4294967296");
  CHECK(parse_error(model(relu, "{channels: 0, height: 8, width: 8}")).find("'input.channels'") != std::string::npos);
  std::string many;
  for (int64_t i = 0; i <= kMaxLayers; ++i) many += "  - {name: r" + std::to_string(i) + ", type: relu}\n";
  CHECK(parse_error(model(many)) == "m.yaml:4:3: 'layers': expected at most 4096 layers, found 4097");
}

TEST_CASE("a key of another layer type names the types that take it", "[cpu]") {
  CHECK(parse_error(model("  - {name: r, type: relu, alpha: 0.1}\n")) ==
        "m.yaml:4:27: 'layers[0].alpha': unknown key 'alpha' for layer type 'relu' (it applies to elu, leaky_relu; "
        "'relu' takes name, type, inputs, backend, algo, precision)");
  CHECK(parse_error(model("  - {name: f, type: flatten}\n  - {name: d, type: dense, units: 3, algo: cpu:im2col_gemm}\n"))
            .find("'layers[1].algo': expected one of auto, found 'cpu:im2col_gemm'") != std::string::npos);
  CHECK(parse_error(model("  - {name: c, type: conv}\n")).find("unknown layer type 'conv', did you mean 'conv2d'?") !=
        std::string::npos);
}

TEST_CASE("every layer type's defaults are in the resolved config as soon as it is parsed", "[cpu]") {
  // Resume compares the checkpoint's resolved config with the one of the model file: both must be
  // complete without building a graph first.
  ModelSpec spec = parse_model_text(model("  - {name: c, type: conv2d, filters: 4, kernel: 3}\n"
                                          "  - {name: b, type: batchnorm}\n"
                                          "  - {name: l, type: leaky_relu}\n"
                                          "  - {name: p, type: avgpool, kernel: [2, 3]}\n"
                                          "  - {name: d, type: dropout}\n"
                                          "  - {name: f, type: flatten}\n"
                                          "  - {name: fc, type: dense, units: 3}\n"),
                                    "m.yaml");
  const std::string yaml = to_yaml(spec.config);
  INFO(yaml);
  for (const char* line : {"    stride: 1\n    dilation: 1\n    padding: 0\n    groups: 1\n    bias: true\n    init: he_normal\n",
                           "    momentum: 0.1\n    eps: 1e-05\n", "    alpha: 0.01\n", "    stride: [2, 3]\n    padding: 0\n",
                           "    p: 0.5\n", "    units: 3\n    backend: auto\n    algo: auto\n    precision: auto\n    bias: true\n"})
    CHECK(yaml.find(line) != std::string::npos);
  CHECK(spec.layers[0].attrs["dilation"].pair() == std::pair<int64_t, int64_t>{1, 1});
}

TEST_CASE("the resolved config of every bundled model parses back to itself", "[cpu]") {
  for (const auto& e : std::filesystem::directory_iterator(std::string(CNN_SOURCE_DIR) + "/models")) {
    INFO(e.path().string());
    ModelSpec spec = load_model_spec(e.path().string());
    const std::string resolved = to_yaml(spec.config);
    ModelSpec again = parse_model_text(resolved, "config.yaml");
    CHECK(to_yaml(again.config) == resolved);
  }
}

TEST_CASE("the key reference covers every registered layer type and every section", "[cpu]") {
  const LayerRegistry& r = LayerRegistry::builtin();
  const std::string md = model_reference_markdown(r.schemas());
  for (const std::string& t : r.types()) CHECK(md.find("| `" + t + "` |") != std::string::npos);
  for (const char* key : {"`data.augment.random_crop.size`", "`train.optimizer.momentum`", "`train.schedule.milestones`",
                          "`loss.class_weights`", "`loss.label_smoothing`", "`data.on_bad_row`",
                          "`train.early_stopping.patience`", "OMP_NUM_THREADS", "CNN_AUTOTUNE_CACHE", "image-folder"})
    CHECK(md.find(key) != std::string::npos);
}
