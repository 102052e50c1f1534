// The layer registry: type name -> factory and the type's key declarations (a Schema the config
// checks each layer map against). register_builtin_layers() lists every built-in type explicitly
// (no static self-registration). Registering a type twice throws; an unknown type is a
// ConfigError listing the known types and the closest match.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "layers/layer.h"

namespace cnn {

using LayerFactory = std::function<std::unique_ptr<Layer>(const LayerSpec&)>;

class LayerRegistry {
public:
  // `keys`: the type's own keys (name, type, inputs, backend and algo are every layer's).
  void add(const std::string& type, LayerFactory factory, Schema keys);
  bool has(const std::string& type) const { return m_factories.count(type) != 0; }
  std::unique_ptr<Layer> create(const LayerSpec& spec) const;
  std::vector<std::string> types() const;
  const LayerSchemas& schemas() const { return m_schemas; }
  // The registry with every built-in layer (built once, on first use).
  static const LayerRegistry& builtin();

private:
  std::map<std::string, LayerFactory> m_factories;
  LayerSchemas m_schemas;
};

void register_builtin_layers(LayerRegistry& registry);

// A model file with the built-in layer types (config/model_spec.h has the general forms).
ModelSpec load_model_spec(const std::string& path, const std::vector<std::string>& overrides = {});
ModelSpec parse_model_text(const std::string& yaml, const std::string& file,
                           const std::vector<std::string>& overrides = {});

// Factories and key declarations of the built-in layers (one file each in lib/layers).
std::unique_ptr<Layer> make_conv2d_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_dense_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_pool_layer(const LayerSpec& spec);         // maxpool, avgpool, global_avgpool
std::unique_ptr<Layer> make_activation_layer(const LayerSpec& spec);   // relu, leaky_relu, elu, sigmoid, tanh
std::unique_ptr<Layer> make_batchnorm_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_dropout_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_flatten_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_add_layer(const LayerSpec& spec);
std::unique_ptr<Layer> make_concat_layer(const LayerSpec& spec);
Schema conv2d_schema();
Schema dense_schema();
Schema pool_schema(const std::string& type);
Schema activation_schema(const std::string& type);
Schema batchnorm_schema();
Schema dropout_schema();
Schema flatten_schema();
Schema add_schema();
Schema concat_schema();

}  // namespace cnn
