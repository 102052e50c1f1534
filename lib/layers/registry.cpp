// Explicit list of built-in layer types. The one place where new layer types are added.
#include "layers/registry.h"

#include "core/error.h"

namespace cnn {

void LayerRegistry::add(const std::string& type, LayerFactory factory, Schema keys) {
  CNN_CHECK(!type.empty(), "empty layer type");
  if (m_factories.count(type)) CNN_THROW("layer type '{}' registered twice", type);
  m_factories.emplace(type, std::move(factory));
  m_schemas.emplace(type, std::move(keys));
}

std::vector<std::string> LayerRegistry::types() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : m_factories) out.push_back(k);
  return out;
}

std::unique_ptr<Layer> LayerRegistry::create(const LayerSpec& spec) const {
  auto it = m_factories.find(spec.type);
  if (it == m_factories.end()) {
    // A spec checked against another registry's schemas.
    const Value* type = spec.attrs.find("type");
    throw ConfigError(type ? type->where() : spec.where, type ? type->path() : "layers." + spec.name + ".type",
                      fmt::format("unknown layer type '{}'{} (known types: {})", spec.type,
                                  did_you_mean(spec.type, types()), join_words(types())));
  }
  return it->second(spec);
}

void register_builtin_layers(LayerRegistry& r) {
  r.add("conv2d", make_conv2d_layer, conv2d_schema());
  r.add("dense", make_dense_layer, dense_schema());
  r.add("maxpool", make_pool_layer, pool_schema("maxpool"));
  r.add("avgpool", make_pool_layer, pool_schema("avgpool"));
  r.add("global_avgpool", make_pool_layer, pool_schema("global_avgpool"));
  r.add("relu", make_activation_layer, activation_schema("relu"));
  r.add("leaky_relu", make_activation_layer, activation_schema("leaky_relu"));
  r.add("elu", make_activation_layer, activation_schema("elu"));
  r.add("sigmoid", make_activation_layer, activation_schema("sigmoid"));
  r.add("tanh", make_activation_layer, activation_schema("tanh"));
  r.add("batchnorm", make_batchnorm_layer, batchnorm_schema());
  r.add("dropout", make_dropout_layer, dropout_schema());
  r.add("flatten", make_flatten_layer, flatten_schema());
  r.add("add", make_add_layer, add_schema());
  r.add("concat", make_concat_layer, concat_schema());
}

const LayerRegistry& LayerRegistry::builtin() {
  static const LayerRegistry registry = [] {
    LayerRegistry r;
    register_builtin_layers(r);
    return r;
  }();
  return registry;
}

ModelSpec load_model_spec(const std::string& path, const std::vector<std::string>& overrides) {
  return load_model_spec(path, overrides, LayerRegistry::builtin().schemas());
}

ModelSpec parse_model_text(const std::string& yaml, const std::string& file, const std::vector<std::string>& overrides) {
  return parse_model_text(yaml, file, overrides, LayerRegistry::builtin().schemas());
}

}  // namespace cnn
