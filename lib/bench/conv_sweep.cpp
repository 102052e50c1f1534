// Sweep files and model conv shapes for `cnn-bench conv` (see conv_sweep.h).
#include "bench/conv_sweep.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "bench/conv_bench.h"
#include "config/model_spec.h"
#include "config/schema.h"
#include "core/error.h"
#include "graph/graph.h"
#include "layers/conv_plan.h"

namespace cnn {

namespace {

const std::vector<std::string> kShapeKeys{"N", "C", "H", "W", "K", "R", "S", "stride", "padding"};
const std::vector<std::string> kDirNames{"forward", "backward_data", "backward_filter"};
const char* const kBaseShapes = "base shapes";  // the group of a file's base shapes

ConvDir parse_dir(const Value& n) {
  for (ConvDir d : kConvDirs)
    if (n.string() == to_string(d)) return d;
  CNN_THROW("unreachable: '{}' is a declared direction", n.string());
}

std::shared_ptr<const Schema> sweep_schema() {
  const int64_t big = kMaxDimension;
  auto defaults = std::make_shared<Schema>("defaults");
  defaults->key("directions", Type::list(Type::choice(kDirNames), 1, 3, "direction"), "directions timed")
      .defaults_to(kDirNames);
  defaults->key("dtype", Type::choice({"float32"}), "element type").defaults_to("float32");
  defaults->key("warmup", Type::integer(0, 1000000), "untimed runs first").defaults_to(5);
  defaults->key("repeats", Type::integer(1, 1000000), "timed runs").defaults_to(20);
  auto shape = std::make_shared<Schema>("shape");
  shape->key("name", Type::string(true), "the shape's name").required();
  for (const std::string& k : kShapeKeys) shape->key(k, Type::integer(k == "padding" ? 0 : 1, big), k).required();
  auto sweep = std::make_shared<Schema>("sweep");
  sweep->key("param",
             Type::any_of({Type::choice(kShapeKeys), Type::list(Type::choice(kShapeKeys), 1, kShapeKeys.size(), "shape key")})
                 .expect("a shape key or a list of them"),
             "the swept shape keys (tied)")
      .required();
  sweep->key("values", Type::list(Type::integer(0, big), 1, 10000, "value"), "their values").required();
  auto one = std::make_shared<Schema>("sweeps item");
  one->key("name", Type::string(true), "the sweep's name").required();
  one->key("base", Type::string(true), "the base shape's name").required();
  one->key("sweep", Type::map(sweep).expect("a map {param, values}"), "what is swept").required();
  auto s = std::make_shared<Schema>("sweep file");
  s->key("version", Type::integer(1, 1), "format version").required();
  s->key("defaults", Type::map(defaults), "settings of every point");
  s->key("shapes", Type::list(Type::map(shape).expect("a shape map {name, N, C, H, W, K, R, S, stride, padding}"), 0,
                              100000, "shape"),
         "base shapes")
      .required();
  s->key("sweeps", Type::list(Type::map(one).expect("a sweep map {name, base, sweep: {param, values}}"), 0, 100000, "sweep"),
         "one-parameter sweeps around base shapes")
      .defaults_to(std::vector<std::string>{});
  return s;
}

// The nine integers of a shape; `at` locates errors (the map or the swept value).
Conv2dShape make_shape(const std::map<std::string, int64_t>& v, const Value& at) {
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

std::vector<ConvPoint> parse_conv_sweep(const Value& raw) {
  const Value root = check(raw, Type::map(sweep_schema()).expect("a sweep file map {version, defaults, shapes, sweeps}"));
  const Value& def = root["defaults"];
  std::vector<ConvDir> directions;
  for (const Value& d : def["directions"].items()) directions.push_back(parse_dir(d));
  const int warmup = int(def["warmup"].integer()), repeats = int(def["repeats"].integer());
  std::vector<ConvPoint> points;
  std::map<std::string, std::map<std::string, int64_t>> bases;
  for (const Value& s : root["shapes"].items()) {
    const std::string name = s["name"].string();
    std::map<std::string, int64_t> v;
    for (const std::string& k : kShapeKeys) v[k] = s[k].integer();
    if (!bases.emplace(name, v).second) s["name"].fail(fmt::format("duplicate shape name '{}'", name));
    points.push_back({kBaseShapes, name, make_shape(v, s), directions, warmup, repeats});
  }
  std::vector<std::string> base_names;
  for (const auto& [k, v] : bases) base_names.push_back(k);
  for (const Value& sw : root["sweeps"].items()) {
    const std::string name = sw["name"].string();
    const std::string base = sw["base"].string();
    if (!bases.count(base))
      sw["base"].fail(fmt::format("unknown base shape '{}'{}", base, did_you_mean(base, base_names)));
    const Value& param = sw["sweep"]["param"];
    const std::vector<std::string> keys = param.is_list() ? param.strings() : std::vector<std::string>{param.string()};
    const Value& values = sw["sweep"]["values"];
    for (size_t j = 0; j < values.size(); ++j) {
      std::map<std::string, int64_t> v = bases[base];
      for (const std::string& k : keys) v[k] = values[j].integer();
      const std::string point = fmt::format("{}/{}={}", name, fmt::join(keys, "="), values[j].integer());
      points.push_back({name, point, make_shape(v, values[j]), directions, warmup, repeats});
    }
  }
  return points;
}

std::vector<ConvPoint> select_conv_points(const std::vector<ConvPoint>& points, const std::vector<std::string>& sweeps,
                                          const std::vector<std::string>& shapes) {
  if (sweeps.empty() && shapes.empty()) return points;
  auto is_base = [](const ConvPoint& p) { return p.group == kBaseShapes; };
  auto is_model = [](const ConvPoint& p) { return p.group.rfind("model ", 0) == 0; };
  auto matches = [](const std::vector<std::string>& globs, const std::string& name) {
    return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) { return glob_match(g, name); });
  };
  std::vector<ConvPoint> out;
  for (const ConvPoint& p : points)
    if (is_model(p) || (is_base(p) ? matches(shapes, p.name) : matches(sweeps, p.group))) out.push_back(p);
  // Every pattern must name something: a typo would otherwise silently time less.
  auto check = [&](const std::vector<std::string>& globs, const char* flag, bool base) {
    std::vector<std::string> names;
    for (const ConvPoint& p : points)
      if (!is_model(p) && is_base(p) == base && std::find(names.begin(), names.end(), base ? p.name : p.group) == names.end())
        names.push_back(base ? p.name : p.group);
    for (const std::string& g : globs)
      if (std::none_of(names.begin(), names.end(), [&](const std::string& n) { return glob_match(g, n); }))
        throw ConfigError({"<command line>"}, flag,
                          fmt::format("'{}' matches no {} of the sweep files{}; there are: {}", g,
                                      base ? "base shape" : "sweep", did_you_mean(g, names), join_some(names, 40)));
  };
  check(sweeps, "--sweep", false);
  check(shapes, "--shape", true);
  return out;
}

std::vector<ConvPoint> load_conv_sweep(const std::string& path) { return parse_conv_sweep(load_yaml_file(path)); }

std::vector<ConvPoint> model_conv_points(const std::vector<std::string>& model_files) {
  std::vector<ConvPoint> points;
  std::set<std::string> seen;
  for (const std::string& file : model_files) {
    ModelSpec spec = load_model_spec(file);
    auto graph = Graph::build(spec);
    for (int i = 0; i < graph->size(); ++i) {
      const Layer& l = *graph->node(i).layer;
      const ConvPlanned* planned = l.conv_planned();
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
