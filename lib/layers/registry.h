// The layer registry: type name -> factory. register_builtin_layers() lists every built-in
// type explicitly (no static self-registration). Registering a type twice throws; an unknown
// type is a ConfigError listing the known types and the closest match.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "layers/layer.h"

namespace cnn {

using LayerFactory = std::function<std::unique_ptr<Layer>(const LayerSpec&)>;

class LayerRegistry {
public:
  void add(const std::string& type, LayerFactory factory);
  bool has(const std::string& type) const { return m_factories.count(type) != 0; }
  std::unique_ptr<Layer> create(const LayerSpec& spec) const;
  std::vector<std::string> types() const;
  // The registry with every built-in layer (built once, on first use).
  static const LayerRegistry& builtin();

private:
  std::map<std::string, LayerFactory> m_factories;
};

void register_builtin_layers(LayerRegistry& registry);

// Factories of the built-in layers (one per file in lib/layers).
std::unique_ptr<Layer> make_conv2d_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_dense_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_pool_layer(const LayerSpec& spec);         // maxpool, avgpool, global_avgpool
std::unique_ptr<Layer> make_activation_layer(const LayerSpec& spec);   // relu, leaky_relu, elu, sigmoid, tanh
std::unique_ptr<Layer> make_batchnorm_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_dropout_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_flatten_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_add_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_concat_layer(const LayerSpec& spec);

}  // namespace cnn
