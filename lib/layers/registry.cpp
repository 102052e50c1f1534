// Explicit list of built-in layer types. The one place where new layer types are added.
#include "layers/registry.h"

#include "core/error.h"

namespace cnn {

void LayerRegistry::add(const std::string& type, LayerFactory factory) {
  CNN_CHECK(!type.empty(), "empty layer type");
  if (m_factories.count(type)) CNN_THROW("layer type '{}' registered twice", type);
  m_factories.emplace(type, std::move(factory));
}

std::vector<std::string> LayerRegistry::types() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : m_factories) out.push_back(k);
  return out;
}

std::unique_ptr<Layer> LayerRegistry::create(const LayerSpec& spec) const {
  auto it = m_factories.find(spec.type);
  if (it == m_factories.end()) {
    std::vector<std::string> known = types();
    std::string list;
    for (const auto& t : known) list += (list.empty() ? "" : ", ") + t;
    Location where = spec.where;
    std::string path = spec.node ? spec.node->path() + ".type" : "type";
    if (spec.node) {
      if (ConfigNode* t = spec.node->find("type")) where = t->where();
    }
    throw ConfigError(
        where, path,
        fmt::format("unknown layer type '{}'{} (known types: {})", spec.type, did_you_mean(spec.type, known), list));
  }
  return it->second(spec);
}

void register_builtin_layers(LayerRegistry& r) {
  r.add("conv2d", make_conv2d_layer);
  r.add("dense", make_dense_layer);
  r.add("maxpool", make_pool_layer);
  r.add("avgpool", make_pool_layer);
  r.add("global_avgpool", make_pool_layer);
  r.add("relu", make_activation_layer);
  r.add("leaky_relu", make_activation_layer);
  r.add("elu", make_activation_layer);
  r.add("sigmoid", make_activation_layer);
  r.add("tanh", make_activation_layer);
  r.add("batchnorm", make_batchnorm_layer);
  r.add("dropout", make_dropout_layer);
  r.add("flatten", make_flatten_layer);
  r.add("add", make_add_layer);
  r.add("concat", make_concat_layer);
}

const LayerRegistry& LayerRegistry::builtin() {
  static const LayerRegistry registry = [] {
    LayerRegistry r;
    register_builtin_layers(r);
    return r;
  }();
  return registry;
}

}  // namespace cnn
