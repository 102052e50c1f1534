// Graph construction: layers from the registry, wiring by name (sequential by default), Kahn's
// topological sort (file order among ready layers), shape inference and the parameter layout.
#include "graph/graph.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/checked.h"
#include "core/error.h"
#include "layers/registry.h"
#include "ops/convert.h"

namespace cnn {

Shape network_input_shape(const ModelSpec& spec) {
  int64_t h = spec.input.height, w = spec.input.width;
  if (spec.data.augment.crop_size > 0) h = w = spec.data.augment.crop_size;
  return Shape{spec.input.channels, h, w};
}

std::unique_ptr<Graph> Graph::build(const ModelSpec& spec) { return build(spec, LayerRegistry::builtin()); }

// An error at a layer's key (its value's location), or at the layer when the key is absent.
static ConfigError located(const LayerSpec& ls, const std::string& key, const std::string& msg) {
  if (const Value* v = ls.attrs.find(key)) return ConfigError(v->where(), v->path(), msg);
  return ConfigError(ls.where, child_path(ls.attrs.path().empty() ? "layers" : ls.attrs.path(), key), msg);
}

// The model input within the per-tensor cap, as a config error at `input` (the cap's one wording,
// tensor_cap_message, as for the layers below).
static void check_input_cap(const ModelSpec& spec, const Shape& input) {
  const Checked n = checked_product(input.dims());
  if (within_tensor_cap(n)) return;
  throw ConfigError(spec.input.config.where().line ? spec.input.config.where() : Location{spec.file}, "input",
                    tensor_cap_message(n, fmt::format("the input per image (channels {}, height {}, width {})",
                                                      input[0], input[1], input[2])));
}

// A layer's output and parameters within the per-tensor cap, as config errors at the layer.
static void check_layer_cap(const Layer& l, const Shape& out) {
  auto fail = [&l](const std::string& what, const Shape& s) {
    throw ConfigError(l.where(), "layers." + l.name(),
                      fmt::format("layer '{}' ({}): {}", l.name(), l.type(),
                                  tensor_cap_message(checked_product(s.dims()), what + " " + s.to_string())));
  };
  if (!within_tensor_cap(checked_product(out.dims()))) fail("the output per image", out);
  for (const ParamInfo& p : l.params())
    if (!within_tensor_cap(checked_product(p.shape.dims()))) fail("the parameter '" + p.name + "'", p.shape);
}

std::unique_ptr<Graph> Graph::build(const ModelSpec& spec, const LayerRegistry& registry) {
  auto g = std::make_unique<Graph>();
  g->m_input_shape = network_input_shape(spec);
  check_input_cap(spec, g->m_input_shape);
  const size_t L = spec.layers.size();
  if (L == 0) throw ConfigError(Location{spec.file}, "layers", "the model has no layers");

  // Names -> file positions; resolve inputs.
  std::map<std::string, int> by_name;
  for (size_t i = 0; i < L; ++i) by_name[spec.layers[i].name] = static_cast<int>(i);
  std::vector<std::string> names;
  for (const auto& ls : spec.layers) names.push_back(ls.name);
  names.push_back("input");
  std::vector<std::vector<int>> inputs(L);
  for (size_t i = 0; i < L; ++i) {
    const LayerSpec& ls = spec.layers[i];
    if (ls.name == "input") throw located(ls, "name", "'input' is reserved for the model's input");
    if (ls.inputs.empty()) {
      inputs[i].push_back(i == 0 ? kModelInput : static_cast<int>(i) - 1);
      continue;
    }
    for (const auto& in : ls.inputs) {
      if (in == "input") {
        inputs[i].push_back(kModelInput);
        continue;
      }
      auto it = by_name.find(in);
      if (it == by_name.end())
        throw located(ls, "inputs",
                      fmt::format("layer '{}' names input '{}', which does not exist{}", ls.name, in,
                                  did_you_mean(in, names)));
      if (it->second == static_cast<int>(i))
        throw located(ls, "inputs", fmt::format("layer '{}' names itself as input", ls.name));
      inputs[i].push_back(it->second);
    }
  }

  // Kahn's algorithm; among ready layers the earliest in the file goes first.
  std::vector<int> indeg(L, 0);
  std::vector<std::vector<int>> consumers(L);
  for (size_t i = 0; i < L; ++i) {
    for (int in : inputs[i]) {
      if (in == kModelInput) continue;
      ++indeg[i];
      consumers[static_cast<size_t>(in)].push_back(static_cast<int>(i));
    }
  }
  std::set<int> ready;
  for (size_t i = 0; i < L; ++i)
    if (!indeg[i]) ready.insert(static_cast<int>(i));
  std::vector<int> order;
  while (!ready.empty()) {
    int i = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(i);
    for (int c : consumers[static_cast<size_t>(i)])
      if (--indeg[static_cast<size_t>(c)] == 0) ready.insert(c);
  }
  if (order.size() != L) {
    std::string cycle;
    for (size_t i = 0; i < L; ++i)
      if (indeg[i]) cycle += (cycle.empty() ? "" : ", ") + spec.layers[i].name;
    const LayerSpec& first = *std::find_if(spec.layers.begin(), spec.layers.end(),
                                           [&](const LayerSpec& s) { return indeg[size_t(s.index)] > 0; });
    throw located(first, "inputs", fmt::format("the layers form a cycle: {} (each waits for another)", cycle));
  }

  // Build layers in topological order; infer shapes.
  std::vector<int> position(L);
  for (size_t k = 0; k < L; ++k) position[static_cast<size_t>(order[k])] = static_cast<int>(k);
  for (size_t k = 0; k < L; ++k) {
    int i = order[k];
    const LayerSpec& ls = spec.layers[static_cast<size_t>(i)];
    GraphNode node;
    node.layer = registry.create(ls);
    int n_in = static_cast<int>(inputs[static_cast<size_t>(i)].size());
    if (n_in < node.layer->min_inputs() || n_in > node.layer->max_inputs())
      throw located(ls, "inputs",
                    fmt::format("layer '{}' ({}) takes {} input(s), got {}", ls.name, ls.type,
                                node.layer->min_inputs() == node.layer->max_inputs()
                                    ? std::to_string(node.layer->min_inputs())
                                    : fmt::format("at least {}", node.layer->min_inputs()),
                                n_in));
    std::vector<Shape> in_shapes;
    for (int in : inputs[static_cast<size_t>(i)]) {
      int p = in == kModelInput ? kModelInput : position[static_cast<size_t>(in)];
      node.inputs.push_back(p);
      in_shapes.push_back(p == kModelInput ? g->m_input_shape : g->m_nodes[static_cast<size_t>(p)].out_shape);
    }
    node.in_shape0 = in_shapes[0];
    node.out_shape = node.layer->infer_shape(in_shapes);
    check_layer_cap(*node.layer, node.out_shape);
    g->m_nodes.push_back(std::move(node));
  }
  for (size_t k = 0; k < L; ++k)
    for (int in : g->m_nodes[k].inputs)
      if (in != kModelInput) g->m_nodes[static_cast<size_t>(in)].consumers.push_back(static_cast<int>(k));

  // Every layer but the last must feed something; the last gives the class scores.
  for (size_t k = 0; k + 1 < L; ++k) {
    if (g->m_nodes[k].consumers.empty()) {
      const Layer& l = *g->m_nodes[k].layer;
      throw ConfigError(l.where(), "layers." + l.name(),
                        fmt::format("the output of layer '{}' is never used; only the final layer ('{}') may be "
                                    "unconsumed", l.name(), g->m_nodes.back().layer->name()));
    }
  }
  const GraphNode& last = g->m_nodes.back();
  if (last.out_shape.rank() != 1) {
    throw ConfigError(last.layer->where(), "layers." + last.layer->name(),
                      fmt::format("the final layer '{}' outputs {}, expected a vector of class scores (add "
                                  "global_avgpool, flatten or dense)",
                                  last.layer->name(), last.out_shape.to_string()));
  }
  int64_t K = last.out_shape[0];
  if (K > kMaxClasses)
    throw ConfigError(last.layer->where(), "layers." + last.layer->name(),
                      fmt::format("the final layer '{}' outputs {} class scores, more than the {} classes this "
                                  "tool evaluates (a K x K confusion matrix is kept)",
                                  last.layer->name(), K, kMaxClasses));
  if (!spec.classes.empty() && static_cast<int64_t>(spec.classes.size()) != K) {
    throw ConfigError(last.layer->where(), "layers." + last.layer->name(),
                      fmt::format("the final layer '{}' outputs {} class scores but `classes` names {}",
                                  last.layer->name(), K, spec.classes.size()));
  }
  if (spec.loss.class_weights == "list" && static_cast<int64_t>(spec.loss.class_weight_values.size()) != K) {
    const Value* w = spec.loss.config.find("class_weights");
    const std::string msg = fmt::format("expected one weight per class ({} classes: the final layer '{}' outputs {}), "
                                        "found {} weights",
                                        K, last.layer->name(), K, spec.loss.class_weight_values.size());
    if (w) w->fail(msg);
    throw ConfigError(last.layer->where(), "loss.class_weights", msg);
  }
  g->m_class_names = spec.classes;
  if (g->m_class_names.empty())
    for (int64_t c = 0; c < K; ++c) g->m_class_names.push_back(fmt::format("class{}", c));

  // Flat layout: trainable tensors in params, the rest in buffers, each 64-byte aligned.
  for (size_t k = 0; k < L; ++k) {
    GraphNode& n = g->m_nodes[k];
    for (const ParamInfo& p : n.layer->params()) {
      ParamEntry e;
      e.name = n.layer->name() + "." + p.name;
      e.shape = p.shape;
      e.trainable = p.trainable;
      e.decay = p.decay;
      e.init = p.init;
      e.node = static_cast<int>(k);
      int64_t& size = p.trainable ? g->m_params_size : g->m_buffers_size;
      e.offset = size;
      // Each tensor is within the cap (check_layer_cap); their sum is checked all the same.
      size = (Checked(size) + (p.shape.numel() + kAlign - 1) / kAlign * kAlign)
                 .value(fmt::format("the flat {} buffer at '{}'", p.trainable ? "parameter" : "buffer", e.name));
      n.params.push_back(static_cast<int>(g->m_params.size()));
      g->m_params.push_back(std::move(e));
    }
  }

  g->fuse_activations(spec.train.fuse_activations);
  g->fold_conv_biases(spec.train.fold_conv_bias);
  g->set_prepack_weights(spec.train.prepack_weights);
  g->set_tf32_layout(spec.train.tf32_layout);
  return g;
}

void Graph::set_class_names(std::vector<std::string> names) {
  if (static_cast<int64_t>(names.size()) != num_classes())
    throw ConfigError(m_nodes.back().layer->where(), "layers." + m_nodes.back().layer->name(),
                      fmt::format("the data has {} classes but the final layer '{}' outputs {} class scores",
                                  names.size(), m_nodes.back().layer->name(), num_classes()));
  m_class_names = std::move(names);
}

int64_t Graph::trainable_count() const {
  Checked n = 0;
  for (const auto& p : m_params)
    if (p.trainable) n = n + p.shape.numel();
  return n.value("the parameter count");
}

int64_t Graph::buffer_count() const {
  Checked n = 0;
  for (const auto& p : m_params)
    if (!p.trainable) n = n + p.shape.numel();
  return n.value("the buffer element count");
}

double Graph::forward_flops() const {
  double f = 0;
  for (const auto& n : m_nodes) f += n.layer->forward_flops();
  return f;
}

double Graph::training_flops() const {
  double f = 0;
  for (const auto& n : m_nodes) f += n.layer->forward_flops() + n.layer->backward_flops();
  return f;
}

void Graph::set_tf32_layout(const std::string& layout) {
  CNN_CHECK(layout == "auto" || layout == "nchw" || layout == "nhwc", "tf32 layout '{}' (expected auto, nchw or nhwc)",
            layout);
  m_tf32_layout = layout;
}

// Why `l`, its dtype set to `t`, must stay f32 on `device` (empty: it may store t): the layer's own
// reason (Layer::dtype_refusal), else no implementation of it for t.
static std::string stays_f32_because(const Layer& l, DType t, Device device) {
  if (std::string why = l.dtype_refusal(t); !why.empty()) return why;
  if (l.can_run_on(device)) return "";
  return fmt::format("no {} implementation of it{} on the {}", to_string(t),
                     l.requested_backend() == "auto" ? "" : " on backend " + l.requested_backend(), to_string(device));
}

std::vector<std::string> Graph::choose_backends(Device device) {
  std::vector<std::string> notes;
  m_precision_notes.clear();
  bool tf32_nhwc = m_tf32_layout == "nhwc" || (m_tf32_layout == "auto" && device == Device::cuda);
  if (m_tf32_layout == "auto" && tf32_nhwc) {
    // auto: channels-last only where every tf32 layer can take it; one that stayed f32 would put
    // a pair of permuting casts around itself (measured on mini_xception's depthwise convolutions:
    // 79 cast kernels a step, no faster than NCHW).
    for (auto& n : m_nodes) {
      Layer& l = *n.layer;
      if (l.precision() != Precision::tf32) continue;
      l.set_dtype(DType::f32cl);
      const std::string why = stays_f32_because(l, DType::f32cl, device);
      if (why.empty()) continue;
      tf32_nhwc = false;
      m_precision_notes.push_back(fmt::format(
          "tf32_layout auto: NCHW, since layer '{}' ({}) would stay f32 channels-last ({}); nhwc forces channels-last",
          l.name(), l.type(), why));
      break;
    }
  }
  for (auto& n : m_nodes) {
    Layer& l = *n.layer;
    const DType want = l.precision() == Precision::tf32 && tf32_nhwc ? DType::f32cl : storage_dtype(l.precision());
    l.set_dtype(want);
    if (want != DType::f32) {
      if (const std::string why = stays_f32_because(l, want, device); !why.empty()) {
        l.set_dtype(DType::f32);
        m_precision_notes.push_back(fmt::format("layer '{}' ({}) stays f32: {}", l.name(), l.type(), why));
      }
    }
    n.layer->choose_backend(device);
    const std::string& req = n.layer->requested_backend();
    if (req == "auto" || req.empty())
      notes.push_back(fmt::format("layer '{}' ({}): auto -> {}", n.layer->name(), n.layer->type(),
                                  to_string(n.layer->backend())));
  }
  // The producers' answers depend on their backends.
  const int fused = fuse_activations(m_fuse);
  if (fused > 0) notes.push_back(fmt::format("{} activation(s) fused into their producers", fused));
  if (const std::string pairs = folded_bias_pairs(); !pairs.empty()) {
    int folded = 0;
    for (const GraphNode& n : m_nodes) folded += n.bias_folded_into >= 0;
    const std::string line = fmt::format("{} conv bias(es) folded into their batchnorms: {}", folded, pairs);
    notes.push_back(line);
    m_precision_notes.push_back(line);
  }
  auto layout = [](DType t) { return activation_layout(t) == Layout::nchw ? "NCHW" : "NHWC"; };
  for (int i = 0; i < size(); ++i) {
    const GraphNode& n = node(i);
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (const int p = n.inputs[k]; casts_input(i, int(k)))
        m_precision_notes.push_back(fmt::format("cast {} -> {}: {} {} -> {} {}",
                                                p == kModelInput ? std::string("input") : node(p).layer->name(),
                                                n.layer->name(), to_string(dtype_of(p)), layout(dtype_of(p)),
                                                to_string(n.layer->dtype()), layout(n.layer->dtype())));
  }
  if (size() > 0 && node(size() - 1).layer->dtype() != DType::f32)
    m_precision_notes.push_back(fmt::format("cast {} -> loss: {} -> f32", node(size() - 1).layer->name(),
                                            to_string(node(size() - 1).layer->dtype())));
  return notes;
}

static bool our_kernels(Backend b) { return b == Backend::cpu || b == Backend::cuda; }

int Graph::fuse_activations(bool enabled) {
  m_fuse = enabled;
  for (auto& n : m_nodes) {
    if (n.fused_act >= 0) n.layer->fuse_activation(nullptr);
    n.fused_into = n.fused_act = -1;
  }
  if (!enabled) return 0;
  int count = 0;
  for (int a = 0; a < size(); ++a) {
    GraphNode& act = m_nodes[static_cast<size_t>(a)];
    const ActivationParams* p = act.layer->activation();
    if (!p || act.inputs.size() != 1 || act.inputs[0] == kModelInput) continue;
    GraphNode& prod = m_nodes[static_cast<size_t>(act.inputs[0])];
    // The producer's output must die into the activation alone (anything else would read act(y)).
    if (prod.consumers.size() != 1 || prod.fused_act >= 0 || prod.fused_into >= 0) continue;
    if (!our_kernels(act.layer->backend())) continue;
    const bool same_device = (act.layer->backend() == Backend::cpu) == (prod.layer->backend() == Backend::cpu);
    if (!(act.layer->backend() == prod.layer->backend()) && !(prod.layer->fuses_on_any_backend() && same_device))
      continue;
    if (act.layer->dtype() != prod.layer->dtype()) continue;  // a cast lies between them
    if (!prod.layer->fuse_activation(p)) continue;
    prod.fused_act = a;
    act.fused_into = act.inputs[0];
    ++count;
  }
  return count;
}

int Graph::fold_conv_biases(bool enabled, bool include_fp32) {
  for (auto& n : m_nodes) {
    if (n.bias_folded_into >= 0) {
      n.layer->fold_bias(false);
      node(n.bias_folded_into).layer->take_mean_offset(nullptr);
    }
    n.bias_folded_into = -1;
  }
  if (!enabled) return 0;
  int count = 0;
  for (int c = 0; c < size(); ++c) {
    GraphNode& conv = m_nodes[static_cast<size_t>(c)];
    if (!conv.layer->conv_planned() || conv.consumers.size() != 1 || conv.fused_act >= 0) continue;
    if (conv.layer->precision() == Precision::fp32 && !include_fp32) continue;
    GraphNode& bn = m_nodes[static_cast<size_t>(conv.consumers[0])];
    // A batchnorm reads one input; the conv's output must reach it alone, and only it.
    if (bn.inputs.size() != 1 || bn.layer->type() != "batchnorm") continue;
    if (!conv.layer->fold_bias(true)) continue;  // no bias
    if (!bn.layer->take_mean_offset(conv.layer.get())) {
      conv.layer->fold_bias(false);
      continue;
    }
    conv.bias_folded_into = conv.consumers[0];
    ++count;
  }
  return count;
}

std::string Graph::folded_bias_pairs() const {
  std::string out;
  for (const GraphNode& n : m_nodes)
    if (n.bias_folded_into >= 0)
      out += (out.empty() ? "" : ", ") + n.layer->name() + " -> " + node(n.bias_folded_into).layer->name();
  return out;
}

std::string Graph::display_name(int i) const {
  const GraphNode& n = node(i);
  if (n.fused_act < 0) return n.layer->name();
  return n.layer->name() + "+" + node(n.fused_act).layer->name();
}

}  // namespace cnn
