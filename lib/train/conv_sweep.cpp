// Sweep files and model conv shapes for `cnn-bench conv` (see conv_sweep.h).
#include "train/conv_sweep.h"

#include <fmt/ranges.h>

#include <map>
#include <set>

#include "config/model_spec.h"
#include "core/error.h"
#include "graph/graph.h"
#include "layers/conv_plan.h"

namespace cnn {

namespace {

const std::vector<std::string> kShapeKeys{"N", "C", "H", "W", "K", "R", "S", "stride", "padding"};

struct Defaults {
  std::vector<ConvDir> directions{ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};
  int warmup = 5, repeats = 20;
};

ConvDir parse_dir(const ConfigNode& n) {
  const std::string s = n.as_string();
  for (ConvDir d : kConvDirs)
    if (s == to_string(d)) return d;
  n.fail(fmt::format("expected forward, backward_data or backward_filter, found '{}'{}", s,
                     did_you_mean(s, {"forward", "backward_data", "backward_filter"})));
}

Defaults read_defaults(ConfigNode& root) {
  Defaults d;
  ConfigNode* n = root.find("defaults");
  if (n == nullptr || n->is_null()) return d;
  n->expect_map();
  if (ConfigNode* dirs = n->find("directions")) {
    dirs->expect_sequence("a list of directions");
    d.directions.clear();
    for (size_t i = 0; i < dirs->size(); ++i) d.directions.push_back(parse_dir((*dirs)[i]));
    if (d.directions.empty()) dirs->fail("expected at least one direction, found an empty list");
  }
  n->get_choice("dtype", {"float32"}, "float32");
  d.warmup = n->get<int>("warmup", d.warmup);
  d.repeats = n->get<int>("repeats", d.repeats);
  if (d.warmup < 0) n->at("warmup").fail("expected warmup >= 0");
  if (d.repeats < 1) n->at("repeats").fail("expected repeats >= 1");
  n->check_unknown_keys();
  return d;
}

// The nine integers of a shape; `at` locates errors (the map or the swept value).
Conv2dShape make_shape(const std::map<std::string, int64_t>& v, const ConfigNode& at) {
  for (const auto& [k, x] : v)
    if (x < (k == "padding" ? 0 : 1)) at.fail(fmt::format("expected {} >= {}, found {}", k, k == "padding" ? 0 : 1, x));
  const int64_t P = (v.at("H") + 2 * v.at("padding") - v.at("R")) / v.at("stride") + 1;
  const int64_t Q = (v.at("W") + 2 * v.at("padding") - v.at("S")) / v.at("stride") + 1;
  if (v.at("H") + 2 * v.at("padding") < v.at("R") || v.at("W") + 2 * v.at("padding") < v.at("S") || P < 1 || Q < 1)
    at.fail(fmt::format("the output would be empty: H={} W={} padding={} is smaller than the {}x{} filter", v.at("H"),
                        v.at("W"), v.at("padding"), v.at("R"), v.at("S")));
  const int s = int(v.at("stride")), p = int(v.at("padding"));
  return Conv2dShape::make(v.at("N"), v.at("C"), v.at("H"), v.at("W"), v.at("K"), v.at("R"), v.at("S"), s, s, p, p);
}

}  // namespace

std::vector<ConvPoint> parse_conv_sweep(ConfigNode& root) {
  root.expect_map("a sweep file map {version, defaults, shapes, sweeps}");
  const int64_t version = root.get<int64_t>("version");
  if (version != 1) root.at("version").fail(fmt::format("expected version 1, found {}", version));
  const Defaults def = read_defaults(root);
  std::vector<ConvPoint> points;
  std::map<std::string, std::map<std::string, int64_t>> bases;
  ConfigNode& shapes = root.at("shapes");
  shapes.expect_sequence("a list of shapes");
  for (size_t i = 0; i < shapes.size(); ++i) {
    ConfigNode& s = shapes[i];
    s.expect_map("a shape map {name, N, C, H, W, K, R, S, stride, padding}");
    const std::string name = s.get<std::string>("name");
    std::map<std::string, int64_t> v;
    for (const std::string& k : kShapeKeys) v[k] = s.get<int64_t>(k);
    s.check_unknown_keys();
    if (!bases.emplace(name, v).second) s.at("name").fail(fmt::format("duplicate shape name '{}'", name));
    points.push_back({"base shapes", name, make_shape(v, s), def.directions, def.warmup, def.repeats});
  }
  if (ConfigNode* sweeps = root.find("sweeps"); sweeps && !sweeps->is_null()) {
    sweeps->expect_sequence("a list of sweeps");
    std::vector<std::string> base_names;
    for (const auto& [k, v] : bases) base_names.push_back(k);
    for (size_t i = 0; i < sweeps->size(); ++i) {
      ConfigNode& sw = (*sweeps)[i];
      sw.expect_map("a sweep map {name, base, sweep: {param, values}}");
      const std::string name = sw.get<std::string>("name");
      const std::string base = sw.get<std::string>("base");
      if (!bases.count(base))
        sw.at("base").fail(fmt::format("unknown base shape '{}'{}", base, did_you_mean(base, base_names)));
      ConfigNode& spec = sw.at("sweep");
      spec.expect_map("a map {param, values}");
      ConfigNode& param = spec.at("param");
      std::vector<std::string> keys;
      if (param.is_sequence()) keys = spec.get_list<std::string>("param");
      else keys = {spec.get<std::string>("param")};
      if (keys.empty()) param.fail("expected a shape key or a list of them, found an empty list");
      for (const std::string& k : keys)
        if (std::find(kShapeKeys.begin(), kShapeKeys.end(), k) == kShapeKeys.end())
          param.fail(fmt::format("unknown shape key '{}'{} (expected one of {})", k, did_you_mean(k, kShapeKeys),
                                 fmt::join(kShapeKeys, ", ")));
      const std::vector<int64_t> values = spec.get_list<int64_t>("values");
      if (values.empty()) spec.at("values").fail("expected at least one value, found an empty list");
      spec.check_unknown_keys();
      sw.check_unknown_keys();
      ConfigNode& value_nodes = spec.at("values");
      for (size_t j = 0; j < values.size(); ++j) {
        std::map<std::string, int64_t> v = bases[base];
        for (const std::string& k : keys) v[k] = values[j];
        const std::string point = fmt::format("{}/{}={}", name, fmt::join(keys, "="), values[j]);
        points.push_back({name, point, make_shape(v, value_nodes[j]), def.directions, def.warmup, def.repeats});
      }
    }
  }
  root.check_unknown_keys();
  return points;
}

std::vector<ConvPoint> load_conv_sweep(const std::string& path) {
  ConfigNode root = load_yaml_file(path);
  return parse_conv_sweep(root);
}

std::vector<ConvPoint> model_conv_points(const std::vector<std::string>& model_files) {
  std::vector<ConvPoint> points;
  std::set<std::string> seen;
  for (const std::string& file : model_files) {
    ModelSpec spec = load_model_spec(file);
    auto graph = Graph::build(spec);
    for (int i = 0; i < graph->size(); ++i) {
      const Layer& l = *graph->node(i).layer;
      auto* planned = dynamic_cast<const ConvPlanned*>(&l);
      if (!planned) continue;
      const Conv2dShape sh = planned->conv_shape(spec.train.batch_size);
      if (!seen.insert(sh.to_string()).second) continue;
      ConvPoint p;
      p.group = "model " + spec.name;
      p.name = spec.name + "/" + l.name();
      p.shape = sh;
      p.directions = {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};
      points.push_back(p);
    }
  }
  return points;
}

}  // namespace cnn
