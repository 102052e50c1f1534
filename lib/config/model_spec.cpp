// Reads the model file of DESIGN.md into ModelSpec: every section but the layers' own attributes.
// Trap: defaults come only from model_spec.h (each member's initial value is the getter's
// fallback, written into the tree); never type a default here. Unknown keys of the sections are
// rejected here; the root and the layer maps get their final check in the graph builder.
#include "config/model_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "core/checked.h"

namespace cnn {

namespace {

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += (i ? ", " : "") + words[i];
  return out;
}

// Fails at `key`'s value unless ok: "expected <expected>, found the number 0".
void require(ConfigNode& map, const std::string& key, bool ok, const std::string& expected) {
  if (ok) return;
  ConfigNode* n = map.find(key);
  CNN_CHECK(n != nullptr, "require('{}') before the key was read", key);
  n->fail(fmt::format("expected {}, found {}", expected, n->describe()));
}

int64_t int_at_least(ConfigNode& map, const std::string& key, int64_t fallback, int64_t lo) {
  int64_t v = map.get<int64_t>(key, fallback);
  require(map, key, v >= lo, fmt::format("an integer >= {}", lo));
  return v;
}

double positive(ConfigNode& map, const std::string& key, double fallback) {
  double v = map.get<double>(key, fallback);
  require(map, key, v > 0 && std::isfinite(v), "a positive number");
  return v;
}

double non_negative(ConfigNode& map, const std::string& key, double fallback) {
  double v = map.get<double>(key, fallback);
  require(map, key, v >= 0 && std::isfinite(v), "a number >= 0");
  return v;
}

// A number in [lo, hi) (or [lo, hi] when hi_inclusive).
double in_range(ConfigNode& map, const std::string& key, double fallback, double lo, double hi,
                bool hi_inclusive = false) {
  double v = map.get<double>(key, fallback);
  bool ok = v >= lo && (hi_inclusive ? v <= hi : v < hi);
  require(map, key, ok, fmt::format("a number in [{}, {}{}", lo, hi, hi_inclusive ? "]" : ")"));
  return v;
}

// An optional section: absent or empty becomes an empty map that the readers fill with defaults.
ConfigNode& section(ConfigNode& parent, const std::string& key) {
  ConfigNode* n = parent.find(key);
  if (n == nullptr || n->is_null()) return parent.set(key, ConfigNode::map(n ? n->where() : parent.where()));
  n->expect_map();
  return *n;
}

// Keys that belong to another `type` of the same section get a message naming who uses them,
// before the generic unknown-key check (which would only say "unknown key").
void check_type_keys(const ConfigNode& sec, const std::string& what, const std::string& type,
                     const std::vector<std::string>& common,
                     const std::map<std::string, std::vector<std::string>>& keys_by_type) {
  std::vector<std::string> accepted = common;
  const auto& own = keys_by_type.at(type);
  accepted.insert(accepted.end(), own.begin(), own.end());
  for (const auto& [key, value] : sec.entries()) {
    if (std::find(accepted.begin(), accepted.end(), key) != accepted.end()) continue;
    std::vector<std::string> users;
    for (const auto& [t, keys] : keys_by_type)
      if (std::find(keys.begin(), keys.end(), key) != keys.end()) users.push_back(t);
    if (users.empty()) continue;
    throw ConfigError(value.key_where(), value.path(),
                      fmt::format("unknown key '{}' for {} type '{}' (it applies to {}; '{}' takes {})", key,
                                  what, type, join(users), type, join(accepted)));
  }
}

void read_input(ConfigNode& root, InputSpec& in) {
  ConfigNode& s = root.at("input");
  s.expect_map("a map {channels, height, width}");
  in.channels = int_at_least(s, "channels", in.channels, 1);
  in.height = s.get<int64_t>("height");
  require(s, "height", in.height >= 1, "an integer >= 1");
  in.width = s.get<int64_t>("width");
  require(s, "width", in.width >= 1, "an integer >= 1");
  s.check_unknown_keys();
}

void read_classes(ConfigNode& root, std::vector<std::string>& classes) {
  classes = root.get_list<std::string>("classes", classes);
  ConfigNode& list = root.at("classes");
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < classes.size(); ++i) {
    if (classes[i].empty()) list[i].fail("expected a class name, found an empty string");
    auto [first, fresh] = seen.emplace(classes[i], i);
    if (!fresh) list[i].fail(fmt::format("duplicate class name '{}' (also classes[{}])", classes[i], first->second));
  }
}

void read_layers(ConfigNode& root, std::vector<LayerSpec>& layers) {
  ConfigNode& list = root.at("layers");
  list.expect_sequence("a list of layers");
  if (list.size() == 0) list.fail("expected at least one layer, found an empty list");
  std::map<std::string, const ConfigNode*> names;  // the layer maps (stable: the list never grows)
  for (size_t i = 0; i < list.size(); ++i) {
    ConfigNode& ln = list[i];
    ln.expect_map("a layer map {name: ..., type: ...}");
    LayerSpec l;
    l.index = static_cast<int>(i);
    l.node = &ln;
    l.where = ln.where();
    l.name = ln.get<std::string>("name");
    // Names become tensor names ("conv1.weight") and --set paths ("layers.conv1.filters").
    bool plain = !l.name.empty() && std::all_of(l.name.begin(), l.name.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '_' || c == '-';
    });
    if (!plain)
      ln.at("name").fail(fmt::format("expected a layer name of letters, digits, '_' and '-', found {}",
                                     ln.at("name").describe()));
    auto [first, fresh] = names.emplace(l.name, &ln);
    if (!fresh)
      ln.at("name").fail(fmt::format("duplicate layer name '{}': {} at line {} has it already", l.name,
                                     first->second->path(), first->second->where().line));
    l.type = ln.get<std::string>("type");
    if (l.type.empty()) ln.at("type").fail("expected a layer type, found an empty string");
    if (ln.has("inputs")) {
      ConfigNode& in = ln.at("inputs");
      if (in.is_scalar()) l.inputs = {in.as_string()};
      else if (in.is_sequence()) l.inputs = ln.get_list<std::string>("inputs");
      else in.fail(fmt::format("expected a layer name or a list of layer names, found {}", in.describe()));
      if (l.inputs.empty()) in.fail("expected at least one input layer name, found an empty list");
    }
    l.backend = ln.get_choice("backend", {"auto", "cpu", "cuda", "cudnn"}, l.backend);
    ConfigNode* algo = ln.find("algo");
    if (algo != nullptr && algo->is_map())
      l.algo = "per_direction";  // {forward: .., backward_data: .., backward_filter: ..}, read by the layer
    else
      l.algo = ln.get<std::string>("algo", l.algo);
    layers.push_back(std::move(l));
  }
}

void read_loss(ConfigNode& root, LossSpec& loss, size_t n_classes) {
  ConfigNode& s = section(root, "loss");
  loss.type = s.get_choice("type", {"softmax_cross_entropy"}, loss.type);
  loss.label_smoothing = in_range(s, "label_smoothing", loss.label_smoothing, 0.0, 1.0);
  ConfigNode* w = s.find("class_weights");
  if (w != nullptr && w->is_sequence()) {
    loss.class_weight_values = s.get_list<double>("class_weights");
    loss.class_weights = "list";
    if (loss.class_weight_values.empty()) w->fail("expected a list of class weights, found an empty list");
    for (size_t i = 0; i < w->size(); ++i)
      if (!(loss.class_weight_values[i] >= 0) || !std::isfinite(loss.class_weight_values[i]))
        (*w)[i].fail(fmt::format("expected a class weight >= 0, found {}", (*w)[i].describe()));
    if (n_classes > 0 && loss.class_weight_values.size() != n_classes)
      w->fail(fmt::format("expected one weight per class ({} classes), found {} weights", n_classes,
                          loss.class_weight_values.size()));
  } else {
    loss.class_weights = s.get_choice("class_weights", {"none", "balanced"}, loss.class_weights);
  }
  s.check_unknown_keys();
}

void read_normalize(ConfigNode& data, NormalizeSpec& norm, int64_t channels) {
  ConfigNode* n = data.find("normalize");
  if (n == nullptr || n->is_null() || n->is_scalar()) {
    if (n != nullptr && n->is_scalar() && n->as_string() != "auto")
      n->fail(fmt::format("expected 'auto' or a map {{mean: [...], std: [...]}}, found {}", n->describe()));
    data.get_choice("normalize", {"auto"}, "auto");
    norm.automatic = true;
    return;
  }
  n->expect_map("'auto' or a map {mean: [...], std: [...]}");
  norm.automatic = false;
  norm.mean = n->get_list<double>("mean");
  norm.std = n->get_list<double>("std");
  auto per_channel = [&](const std::string& key, size_t size) {
    if (static_cast<int64_t>(size) != channels)
      n->at(key).fail(fmt::format("expected {} values (one per input channel), found {}", channels, size));
  };
  per_channel("mean", norm.mean.size());
  per_channel("std", norm.std.size());
  for (size_t i = 0; i < norm.std.size(); ++i)
    if (!(norm.std[i] > 0)) n->at("std")[i].fail(fmt::format("expected a positive number, found {}", n->at("std")[i].describe()));
}

void read_augment(ConfigNode& data, AugmentSpec& aug, const InputSpec& input) {
  ConfigNode& s = section(data, "augment");
  ConfigNode& crop = section(s, "random_crop");
  aug.crop_size = int_at_least(crop, "size", aug.crop_size, 0);
  aug.crop_padding = int_at_least(crop, "padding", aug.crop_padding, 0);
  // The padded image is one tensor: within the per-tensor cap (core/checked.h), so its sizes fit.
  const Checked padded_h = Checked(aug.crop_padding) * 2 + input.height;
  const Checked padded_w = Checked(aug.crop_padding) * 2 + input.width;
  require(crop, "padding", aug.crop_padding == 0 || within_tensor_cap(padded_h * padded_w * input.channels),
          fmt::format("a padding that keeps the padded image within the per-tensor cap of {} elements",
                      kMaxTensorElements));
  const int64_t largest = aug.crop_padding == 0 ? std::min(input.height, input.width)
                                                : std::min(padded_h.value(""), padded_w.value(""));
  require(crop, "size", aug.crop_size <= largest,
          fmt::format("a crop size <= {} (the input plus twice the padding)", largest));
  aug.hflip = s.get<bool>("hflip", aug.hflip);
  aug.rotate = in_range(s, "rotate", aug.rotate, 0.0, 180.0, true);
  aug.brightness = in_range(s, "brightness", aug.brightness, 0.0, 1.0, true);
  aug.contrast = in_range(s, "contrast", aug.contrast, 0.0, 1.0, true);
}

void read_data(ConfigNode& root, DataSpec& d, const InputSpec& input) {
  ConfigNode& s = section(root, "data");
  d.format = s.get_choice("format", {"fer2013-csv", "image-folder", "idx", "synthetic"}, d.format);
  d.path = s.get<std::string>("path", d.path);  // an empty path is the data loader's error
  read_normalize(s, d.normalize, input.channels);
  read_augment(s, d.augment, input);
  d.val_split = in_range(s, "val_split", d.val_split, 0.0, 1.0);
  d.split_seed = s.get<uint64_t>("split_seed", d.split_seed);
  d.on_bad_row = s.get_choice("on_bad_row", {"error", "skip"}, d.on_bad_row);
  d.workers = int_at_least(s, "workers", d.workers, 0);
  d.prefetch = int_at_least(s, "prefetch", d.prefetch, 1);
  d.drop_last = s.get<bool>("drop_last", d.drop_last);
  d.synthetic_size = int_at_least(s, "synthetic_size", d.synthetic_size, 1);
  d.color = s.get_choice("color", {"auto", "gray", "rgb"}, d.color);
  d.gpu_resident = s.get_choice("gpu_resident", {"auto", "on", "off"}, d.gpu_resident);
  s.check_unknown_keys();
}

void read_optimizer(ConfigNode& train, OptimizerSpec& o) {
  ConfigNode& s = section(train, "optimizer");
  o.type = s.get_choice("type", {"sgd", "adam", "adamw", "rmsprop"}, o.type);
  o.lr = positive(s, "lr", o.lr);
  o.weight_decay = non_negative(s, "weight_decay", o.weight_decay);
  if (o.type == "sgd") {
    o.momentum = in_range(s, "momentum", o.momentum, 0.0, 1.0);
    o.nesterov = s.get<bool>("nesterov", o.nesterov);
    require(s, "nesterov", !o.nesterov || o.momentum > 0, "false (Nesterov needs momentum > 0)");
  } else if (o.type == "rmsprop") {
    o.alpha = in_range(s, "alpha", o.alpha, 0.0, 1.0);
    o.momentum = in_range(s, "momentum", o.momentum, 0.0, 1.0);
    o.eps = positive(s, "eps", o.eps);
  } else {
    o.beta1 = in_range(s, "beta1", o.beta1, 0.0, 1.0);
    o.beta2 = in_range(s, "beta2", o.beta2, 0.0, 1.0);
    o.eps = positive(s, "eps", o.eps);
  }
  check_type_keys(s, "optimizer", o.type, {"type", "lr", "weight_decay"},
                  {{"sgd", {"momentum", "nesterov"}},
                   {"adam", {"beta1", "beta2", "eps"}},
                   {"adamw", {"beta1", "beta2", "eps"}},
                   {"rmsprop", {"alpha", "momentum", "eps"}}});
}

void read_schedule(ConfigNode& train, ScheduleSpec& sc) {
  ConfigNode& s = section(train, "schedule");
  sc.type = s.get_choice("type", {"constant", "step", "multistep", "exponential", "cosine", "plateau"}, sc.type);
  sc.warmup_epochs = non_negative(s, "warmup_epochs", sc.warmup_epochs);
  sc.warmup_start_factor = in_range(s, "warmup_start_factor", sc.warmup_start_factor, 0.0, 1.0, true);
  auto decay = [&] {
    double g = s.get<double>("gamma", sc.gamma);
    require(s, "gamma", g > 0 && g <= 1, "a decay factor in (0, 1]");
    return g;
  };
  if (sc.type == "step") {
    sc.step_size = int_at_least(s, "step_size", sc.step_size, 1);
    sc.gamma = decay();
  } else if (sc.type == "multistep") {
    sc.milestones = s.get_list<int64_t>("milestones");
    ConfigNode& list = s.at("milestones");
    if (sc.milestones.empty()) list.fail("expected a list of epochs, found an empty list");
    for (size_t i = 0; i < sc.milestones.size(); ++i) {
      int64_t lo = i == 0 ? 1 : sc.milestones[i - 1] + 1;
      if (sc.milestones[i] < lo)
        list[i].fail(fmt::format("expected an increasing epoch >= {}, found {}", lo, list[i].describe()));
    }
    sc.gamma = decay();
  } else if (sc.type == "exponential") {
    sc.gamma = decay();
  } else if (sc.type == "cosine") {
    sc.min_lr = non_negative(s, "min_lr", sc.min_lr);
  } else if (sc.type == "plateau") {
    sc.monitor = s.get_choice("monitor", {"val_loss", "val_acc"}, sc.monitor);
    sc.factor = s.get<double>("factor", sc.factor);
    require(s, "factor", sc.factor > 0 && sc.factor < 1, "a factor in (0, 1)");
    sc.patience = int_at_least(s, "patience", sc.patience, 0);
    sc.threshold = non_negative(s, "threshold", sc.threshold);
  }
  check_type_keys(s, "schedule", sc.type, {"type", "warmup_epochs", "warmup_start_factor"},
                  {{"constant", {}},
                   {"step", {"step_size", "gamma"}},
                   {"multistep", {"milestones", "gamma"}},
                   {"exponential", {"gamma"}},
                   {"cosine", {"min_lr"}},
                   {"plateau", {"monitor", "factor", "patience", "threshold"}}});
}

void read_train(ConfigNode& root, TrainSpec& t) {
  ConfigNode& s = section(root, "train");
  t.epochs = int_at_least(s, "epochs", t.epochs, 1);
  t.batch_size = int_at_least(s, "batch_size", t.batch_size, 1);
  t.seed = s.get<uint64_t>("seed", t.seed);
  t.deterministic = s.get<bool>("deterministic", t.deterministic);
  t.fuse_activations = s.get<bool>("fuse_activations", t.fuse_activations);
  t.max_steps = int_at_least(s, "max_steps", t.max_steps, 0);
  t.cuda_graph = s.get<bool>("cuda_graph", t.cuda_graph);
  t.backend = s.get_choice("backend", {"auto", "cuda", "cudnn"}, t.backend);
  t.clip_grad_norm = non_negative(s, "clip_grad_norm", t.clip_grad_norm);
  t.lr_scaling = s.get_choice("lr_scaling", {"none", "linear", "sqrt"}, t.lr_scaling);
  t.log_every = int_at_least(s, "log_every", t.log_every, 1);
  read_optimizer(s, t.optimizer);
  read_schedule(s, t.schedule);
  ConfigNode& c = section(s, "checkpoint");
  t.checkpoint.every_epochs = int_at_least(c, "every_epochs", t.checkpoint.every_epochs, 0);
  t.checkpoint.keep_last = int_at_least(c, "keep_last", t.checkpoint.keep_last, 0);
  t.checkpoint.best_metric = c.get_choice("best_metric", {"val_acc", "val_loss"}, t.checkpoint.best_metric);
  s.check_unknown_keys();
}

void read_eval(ConfigNode& root, EvalSpec& e) {
  ConfigNode& s = section(root, "eval");
  e.ten_crop = s.get<bool>("ten_crop", e.ten_crop);
  e.batch_size = int_at_least(s, "batch_size", e.batch_size, 1);
  e.test_every_epoch = s.get<bool>("test_every_epoch", e.test_every_epoch);
  s.check_unknown_keys();
}

void read_dist(ConfigNode& root, DistSpec& d) {
  ConfigNode& s = section(root, "dist");
  d.bucket_mb = positive(s, "bucket_mb", d.bucket_mb);
  d.timeout_s = positive(s, "timeout_s", d.timeout_s);
  d.compress = s.get_choice("compress", {"none", "bf16"}, d.compress);
  d.sync_batchnorm = s.get<bool>("sync_batchnorm", d.sync_batchnorm);
  s.check_unknown_keys();
}

// A top-level key that is no section: suggest a section name, or a key of a section when the
// user put it at the wrong level ("optimiser:" -> 'train.optimizer'). Only names suggestions;
// the sections' readers stay the authority on what they accept.
void check_top_level_keys(ConfigNode& root) {
  static const std::vector<std::string> top = {"name", "input", "classes", "layers", "loss",
                                               "data", "train", "eval", "dist"};
  static const std::vector<std::string> nested = {
      "input.channels", "input.height", "input.width", "loss.label_smoothing", "loss.class_weights",
      "data.format", "data.path", "data.normalize", "data.augment", "data.val_split", "data.workers",
      "train.epochs", "train.batch_size", "train.seed", "train.deterministic", "train.max_steps",
      "train.optimizer", "train.schedule", "train.checkpoint", "eval.ten_crop", "dist.sync_batchnorm"};
  root.mark_known(top);
  for (const auto& [key, value] : root.entries()) {
    if (std::find(top.begin(), top.end(), key) != top.end()) continue;
    std::string hint = did_you_mean(key, top);
    if (hint.empty()) {
      std::vector<std::string> last;
      for (const auto& n : nested) last.push_back(n.substr(n.find('.') + 1));
      std::string m = closest_match(key, last);
      if (!m.empty()) hint = fmt::format(", did you mean '{}'?", nested[std::find(last.begin(), last.end(), m) - last.begin()]);
    }
    if (hint.empty()) hint = fmt::format(" (the top level takes {})", join(top));
    throw ConfigError(value.key_where(), value.path(), fmt::format("unknown key '{}'{}", key, hint));
  }
}

}  // namespace

ModelSpec parse_model_spec(std::shared_ptr<ConfigNode> root, const std::string& file) {
  CNN_CHECK(root != nullptr, "parse_model_spec: no tree");
  ConfigNode& r = *root;
  r.expect_map("a model description (a map with name, input, layers, ...)");
  // Top-level typos first: "optimiser:" should not surface as some later, unrelated error.
  check_top_level_keys(r);

  ModelSpec spec;
  spec.file = file;
  spec.root = root;
  spec.name = r.get<std::string>("name");
  if (spec.name.empty()) r.at("name").fail("expected a model name, found an empty string");
  read_input(r, spec.input);
  read_classes(r, spec.classes);
  read_layers(r, spec.layers);
  read_loss(r, spec.loss, spec.classes.size());
  read_data(r, spec.data, spec.input);
  read_train(r, spec.train);
  for (LayerSpec& l : spec.layers) l.preferred_backend = spec.train.backend;
  read_eval(r, spec.eval);
  read_dist(r, spec.dist);
  return spec;
}

ModelSpec parse_model_text(const std::string& yaml, const std::string& file,
                           const std::vector<std::string>& overrides) {
  auto root = std::make_shared<ConfigNode>(parse_yaml(yaml, file));
  for (const auto& o : overrides) root->apply_override(o);
  return parse_model_spec(root, file);
}

ModelSpec load_model_spec(const std::string& path, const std::vector<std::string>& overrides) {
  auto root = std::make_shared<ConfigNode>(load_yaml_file(path));
  for (const auto& o : overrides) root->apply_override(o);
  return parse_model_spec(root, path);
}

}  // namespace cnn
