// Helpers of the config tests: catching a ConfigError, and a few layer types declared the way the
// layer registry declares them (the config tests link lib/config only).
#pragma once

#include <stdexcept>
#include <string>

#include "config/model_spec.h"
#include "support/catch.h"

namespace cnn::test {

template <typename F>
ConfigError config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e;
  }
  FAIL("expected a ConfigError, none was thrown");
  throw std::logic_error("unreachable");
}

// conv2d (filters, kernel, stride), relu, leaky_relu (alpha) and dense (units).
inline const LayerSchemas& test_layers() {
  static const LayerSchemas layers = [] {
    LayerSchemas l;
    Schema conv("conv2d", "a convolution");
    conv.key("filters", Type::integer(1, kMaxDimension), "output channels").required();
    conv.key("kernel", Type::int_pair(1, kMaxDimension), "filter size").required();
    conv.key("stride", Type::int_pair(1, kMaxDimension), "step").defaults_to(1);
    l.emplace("conv2d", conv);
    l.emplace("relu", Schema("relu", "max(x, 0)"));
    Schema leaky("leaky_relu", "leaky");
    leaky.key("alpha", Type::real(-1e6, 1e6), "slope").defaults_to(0.01);
    l.emplace("leaky_relu", leaky);
    Schema dense("dense", "fully connected");
    dense.key("units", Type::integer(1, kMaxDimension), "outputs").required();
    l.emplace("dense", dense);
    return l;
  }();
  return layers;
}

inline ModelSpec parse_model(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_model_text(text, "m.yaml", overrides, test_layers());
}

}  // namespace cnn::test
