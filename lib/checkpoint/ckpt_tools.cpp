// inspect / verify / diff of checkpoints (see ckpt_tools.h).
#include "checkpoint/ckpt_tools.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>

#include "checkpoint/bounded_json.h"
#include "checkpoint/checksum.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "graph/graph.h"
#include "model/model_stack.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "checkpoint/checkpoint_state.h"

namespace cnn {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

bool is_float_dtype(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }

// Metadata keys shown in the summary (the rest, checksums and config aside, go to other_metadata).
const std::set<std::string> kSummaryKeys{"format",      "format_version",
                                         "epoch",       "next_batch",
                                         "step",        "optimizer_steps",
                                         "world_size",  "dataset_fingerprint",
                                         "schedule",    "rng",
                                         "loss_scale",
                                         "metrics",     "epoch_progress",
                                         "best_metric", "config"};

bool skip_metadata_key(const std::string& k) { return k == "config" || k.rfind(kChecksumKeyPrefix, 0) == 0; }

// An integer, a number or a JSON object/array when the text is one; else the text itself (also
// when it nests deeper than kMaxMetadataJsonDepth, or when the values parsed so far, counted in
// `json_values`, and its own exceed kMaxMetadataJsonValues: such a value is shown, never built).
json typed_value(const std::string& text, size_t& json_values) {
  if (text.empty()) return text;
  if (text.find_first_not_of("0123456789+-.eE") == std::string::npos) {  // no "inf", "nan", hex
    char* end = nullptr;
    errno = 0;
    long long i = std::strtoll(text.c_str(), &end, 10);
    if (errno == 0 && end == text.c_str() + text.size()) return i;
    double d = std::strtod(text.c_str(), &end);
    if (end == text.c_str() + text.size() && std::isfinite(d)) return d;
  }
  if (text[0] == '{' || text[0] == '[') {
    try {
      return parse_bounded_json(text, {kMaxMetadataJsonDepth, kMaxMetadataJsonValues}, "metadata value", &json_values);
    } catch (const Error&) {
      return text;
    }
  }
  return text;
}

TensorStats stats_of(const SafetensorsFile& f, const TensorInfo& info) {
  TensorStats s;
  s.name = info.name;
  s.dtype = dtype_name(info.dtype);
  s.shape = info.shape;
  s.numel = info.numel();
  s.bytes = info.bytes();
  s.is_float = is_float_dtype(info.dtype);
  if (!s.is_float) return s;
  std::vector<float> v = f.read_f32(info.name);
  double sum = 0, sum_sq = 0;
  int64_t finite = 0;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (float x : v) {
    if (std::isnan(x)) {
      ++s.nan;
    } else if (std::isinf(x)) {
      ++s.inf;
    } else {
      lo = std::min(lo, double(x)), hi = std::max(hi, double(x));
      sum += x, ++finite;
    }
  }
  if (finite == 0) return s;
  s.has_stats = true;
  s.min = lo, s.max = hi, s.mean = sum / double(finite);
  for (float x : v)  // two passes: the one-pass formula loses precision when |mean| >> std
    if (std::isfinite(x)) sum_sq += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(sum_sq / double(finite));
  return s;
}

std::string num(double x) { return fmt::format("{:.4g}", x); }

// Width of a table's name column: the longest name, at most 60 characters; a longer name overflows
// its own row. Padding every row to the longest name let one 50 MB name in a hostile header make
// 65536 rows of 50 MB each.
size_t name_column(size_t longest) { return std::clamp<size_t>(longest, 4, 60); }

std::string clip(const std::string& s, size_t max_chars) {
  return s.size() <= max_chars ? s : clip_text(s, max_chars) + fmt::format(" ({} bytes)", s.size());
}

}  // namespace

InspectReport inspect_checkpoint(const std::string& path_or_run_dir) {
  InspectReport r;
  r.path = resolve_checkpoint_path(path_or_run_dir);
  SafetensorsFile f = SafetensorsFile::open(r.path);
  r.file_bytes = fs::file_size(r.path);
  ChecksumReport cs = verify_checksums(f);
  r.checksums_matched = cs.matched;
  const auto& m = f.metadata();
  r.cnn_train_format = has_checkpoint_format(m);
  if (!cs.ok())
    r.checksum_problem = fmt::format("tensor '{}': {}", cs.first_mismatch, cs.message);
  else if (r.cnn_train_format && !cs.unchecked.empty())
    r.checksum_problem = fmt::format("no checksum for {} of {} tensors (first: '{}')", cs.unchecked.size(),
                                     f.tensors().size(), cs.unchecked.front());
  if (r.cnn_train_format) {
    // Every check read_checkpoint makes after the checksums: a reader would refuse what fails here.
    try {
      CheckpointMeta meta = read_checkpoint_meta(f);
      ModelSpec spec = validated_checkpoint_spec(meta.config_yaml, r.path);
      std::vector<std::string> problems = metadata_problems(meta, spec);
      if (!problems.empty())
        r.metadata_problem = fmt::format("checkpoint '{}' has impossible metadata: {}", r.path, join(problems, "; "));
    } catch (const std::exception& e) {
      r.metadata_problem = e.what();
    }
  }
  r.summary = json::object();
  r.other_metadata = json::object();
  size_t json_values = 0;
  for (const auto& [k, v] : m) {
    if (skip_metadata_key(k)) continue;
    if (kSummaryKeys.count(k))
      r.summary[k] = typed_value(v, json_values);
    else
      r.other_metadata[k] = v;
  }
  if (r.summary.contains("rng") && r.summary["rng"].is_object() && r.summary["rng"].contains("seed"))
    r.summary["seed"] = r.summary["rng"]["seed"];
  r.summary.erase("rng");
  if (m.count("config")) {
    r.config_yaml = m.at("config");
    try {
      ModelSpec spec = parse_model_text(r.config_yaml, r.path + " (config)");
      r.summary["model"] = spec.name;
      r.summary["epochs"] = spec.train.epochs;
      r.summary["optimizer"] = spec.train.optimizer.type;
      r.summary["precision"] = spec.train.precision;  // train.precision, from the config
      r.summary["best_metric_name"] = spec.train.checkpoint.best_metric;
    } catch (const std::exception& e) {
      r.summary["config_error"] = e.what();
    }
  }
  for (const TensorInfo& info : f.tensors()) r.tensors.push_back(stats_of(f, info));
  return r;
}

json to_json(const InspectReport& r) {
  json tensors = json::array();
  for (const TensorStats& s : r.tensors) {
    json t{{"name", s.name}, {"dtype", s.dtype}, {"shape", s.shape}, {"numel", s.numel}, {"bytes", s.bytes}};
    for (const char* k : {"min", "max", "mean", "std"}) t[k] = nullptr;
    if (s.has_stats) t["min"] = s.min, t["max"] = s.max, t["mean"] = s.mean, t["std"] = s.std;
    t["nan"] = s.is_float ? json(s.nan) : json(nullptr);
    t["inf"] = s.is_float ? json(s.inf) : json(nullptr);
    tensors.push_back(t);
  }
  json checks{{"matched", r.checksums_matched}, {"ok", r.checksum_problem.empty()}};
  if (!r.checksum_problem.empty()) checks["problem"] = r.checksum_problem;
  return json{{"path", r.path},
              {"file_bytes", r.file_bytes},
              {"valid", r.ok()},
              {"metadata_problem", r.metadata_problem.empty() ? json(nullptr) : json(r.metadata_problem)},
              {"summary", r.summary},
              {"checksums", checks},
              {"metadata", r.other_metadata},
              {"tensors", tensors},
              {"has_config", !r.config_yaml.empty()}};
}

std::string to_text(const InspectReport& r) {
  const json& s = r.summary;
  auto get = [&](const char* k) {
    return s.contains(k) ? (s[k].is_string() ? s[k].get<std::string>() : s[k].dump()) : "-";
  };
  std::string out;
  auto row = [&](const char* label, const std::string& value) { out += fmt::format("{:<15}{}\n", label, value); };
  row("checkpoint:", fmt::format("{} ({} bytes)", r.path, r.file_bytes));
  row("format:",
      s.contains("format") ? get("format") + " version " + get("format_version") : "- (not a cnn-train checkpoint)");
  if (s.contains("config_error")) row("config:", "does not parse: " + get("config_error"));
  row("model:", get("model"));
  if (s.contains("precision")) row("precision:", get("precision"));
  if (s.contains("epoch")) {
    std::string of = s.contains("epochs") ? " of " + get("epochs") : "";
    // Hostile values stay text: only integers in [0, 2^48] take part in arithmetic.
    auto count = [&](const char* k) {
      return s.contains(k) && s[k].is_number_integer() && s[k].get<int64_t>() >= 0 &&
                     s[k].get<int64_t>() <= kMaxMetaCount
                 ? s[k].get<int64_t>()
                 : int64_t(-1);
    };
    const int64_t e = count("epoch"), next = count("next_batch");
    row("position:", e >= 0 && next > 0
                         ? fmt::format("epoch {}{} in progress, next batch {} (data cursor)", e + 1, of, next)
                         : fmt::format("{}{} epochs done", get("epoch"), of));
  }
  if (s.contains("step"))
    row("step:", get("step") + " (optimizer steps " + get("optimizer_steps") + ", " + get("optimizer") + ")");
  for (auto [label, key] : {std::pair{"schedule:", "schedule"},
                            {"loss scale:", "loss_scale"},
                            {"seed:", "seed"},
                            {"dataset:", "dataset_fingerprint"},
                            {"world size:", "world_size"}})
    if (s.contains(key)) row(label, get(key));
  if (s.contains("metrics") && s["metrics"].is_object()) {
    std::vector<std::string> parts;
    for (auto& [k, v] : s["metrics"].items())
      if (k != "event") parts.push_back(k + " " + (v.is_number_float() ? num(v.get<double>()) : v.dump()));
    row("last metrics:", parts.empty() ? "-" : join(parts));
  }
  if (s.contains("best_metric")) row("best metric:", get("best_metric_name") + " " + get("best_metric"));
  row("checksums:", r.checksum_problem.empty() ? fmt::format("{} tensors match", r.checksums_matched)
                                               : "FAIL: " + r.checksum_problem);
  if (!r.metadata_problem.empty()) row("metadata:", "FAIL: " + r.metadata_problem);
  for (auto& [k, v] : r.other_metadata.items()) row((k + ":").c_str(), clip(v.get<std::string>(), 200));

  size_t longest = 0;
  int64_t total = 0;
  for (const TensorStats& t : r.tensors) longest = std::max(longest, t.name.size()), total += t.numel;
  const size_t w = name_column(longest);
  out += fmt::format("\n{:<{}}  {:<5} {:<16} {:>11} {:>11} {:>11} {:>11} {:>7}\n", "name", w, "dtype", "shape", "min",
                     "max", "mean", "std", "nan/inf");
  for (const TensorStats& t : r.tensors) {
    std::string a = "n/a", b = "n/a", c = "n/a", d = "n/a";
    if (t.has_stats)
      a = num(t.min), b = num(t.max), c = num(t.mean), d = num(t.std);
    else if (t.is_float)
      a = b = c = d = "-";
    std::string bad = t.is_float ? fmt::format("{}/{}", t.nan, t.inf) : "n/a";
    out += fmt::format("{:<{}}  {:<5} {:<16} {:>11} {:>11} {:>11} {:>11} {:>7}\n", t.name, w, t.dtype,
                       shape_text(t.shape), a, b, c, d, bad);
  }
  out += fmt::format("{} tensors, {} elements\n", r.tensors.size(), total);
  return out;
}

namespace {

// Parameters and buffers of the graph against the file's non-optimizer tensors.
std::vector<std::string> compare_parameters(const Graph& g, const SafetensorsFile& f) {
  std::vector<std::string> missing, unexpected, wrong;
  std::set<std::string> ours;
  for (const ParamEntry& e : g.params()) {
    ours.insert(e.name);
    if (!f.contains(e.name)) {
      missing.push_back(e.name);
      continue;
    }
    const TensorInfo& info = f.info(e.name);
    if (info.shape != e.shape.dims() || info.dtype != DType::f32)
      wrong.push_back(fmt::format("{} (file {} {}, model F32 {})", e.name, dtype_name(info.dtype),
                                  shape_text(info.shape), shape_text(e.shape.dims())));
  }
  for (const TensorInfo& t : f.tensors())
    if (t.name.rfind("optim.", 0) != 0 && !ours.count(t.name)) unexpected.push_back(t.name);
  std::vector<std::string> out;
  if (!missing.empty()) out.push_back("missing: " + join_some(missing, kNamesShown));
  if (!unexpected.empty()) out.push_back("unexpected: " + join_some(unexpected, kNamesShown));
  if (!wrong.empty()) out.push_back("mismatched: " + join_some(wrong, kNamesShown));
  return out;
}

// The optimizer slots the config implies against the file's optim.* tensors.
std::vector<std::string> compare_optimizer(const Graph& g, const ModelSpec& spec, const SafetensorsFile& f) {
  std::unique_ptr<Optimizer> opt = make_graph_optimizer(g, spec.train.optimizer);
  std::vector<std::string> missing, unexpected, wrong;
  std::set<std::string> want;
  for (auto& [name, t] : opt->state_tensors()) {
    want.insert(name);
    if (!f.contains(name))
      missing.push_back(name);
    else if (f.info(name).shape != t.shape().dims() || f.info(name).dtype != DType::f32)
      wrong.push_back(fmt::format("{} (file {} {}, expected F32 {})", name, dtype_name(f.info(name).dtype),
                                  shape_text(f.info(name).shape), shape_text(t.shape().dims())));
  }
  for (const TensorInfo& t : f.tensors())
    if (t.name.rfind("optim.", 0) == 0 && !want.count(t.name)) unexpected.push_back(t.name);
  std::vector<std::string> out;
  std::string kind = spec.train.optimizer.type;
  if (!missing.empty()) out.push_back(fmt::format("missing for {}: {}", kind, join_some(missing, kNamesShown)));
  if (!unexpected.empty())
    out.push_back(fmt::format("not slots of {}: {}", kind, join_some(unexpected, kNamesShown)));
  if (!wrong.empty()) out.push_back("mismatched: " + join_some(wrong, kNamesShown));
  return out;
}

}  // namespace

VerifyReport verify_checkpoint(const std::string& path_or_run_dir) {
  VerifyReport r;
  r.path = path_or_run_dir;
  using Problems = std::vector<std::string>;
  auto check = [&](const std::string& name, const Problems& problems, const std::string& ok_detail) {
    r.checks.push_back({name, problems.empty(), problems.empty() ? ok_detail : join(problems, "; ")});
    for (const auto& p : problems) r.problems.push_back(name + ": " + p);
    return problems.empty();
  };
  // Runs one check; `body` returns its problems and sets the detail shown when there are none.
  auto attempt = [&](const std::string& name, const std::function<Problems(std::string&)>& body) {
    std::string detail;
    try {
      Problems p = body(detail);
      return check(name, p, detail);
    } catch (const std::exception& e) {
      return check(name, {e.what()}, "");
    }
  };
  std::optional<SafetensorsFile> f;
  if (!attempt("header", [&](std::string& detail) {
        r.path = resolve_checkpoint_path(path_or_run_dir);
        f = SafetensorsFile::open(r.path);
        detail = fmt::format("{} tensors, {} data bytes", f->tensors().size(), f->data_size());
        return Problems{};
      }))
    return r;
  CheckpointMeta meta;
  bool meta_ok = attempt("metadata", [&](std::string& detail) {
    meta = read_checkpoint_meta(*f);
    detail = fmt::format("{} version {}, epoch {}, next batch {}, step {}", kCheckpointFormat, kCheckpointVersion,
                         meta.epoch, meta.next_batch, meta.step);
    return Problems{};
  });
  // Checked after the metadata so that a file of another program is reported as such first.
  attempt("checksums", [&](std::string& detail) {
    ChecksumReport cs = verify_checksums(*f);
    Problems p;
    if (!cs.ok()) p.push_back(fmt::format("tensor '{}': {}", cs.first_mismatch, cs.message));
    if (!cs.unchecked.empty())
      p.push_back(fmt::format("no checksum for {} of {} tensors ({})", cs.unchecked.size(), f->tensors().size(),
                              join_some(cs.unchecked, 3)));
    detail = fmt::format("{} tensors match", cs.matched);
    return p;
  });
  if (!meta_ok) return r;
  ModelSpec spec;
  std::unique_ptr<ModelStack> model;  // the graph only: nothing runs
  if (!attempt("config", [&](std::string& detail) {
        spec = validated_checkpoint_spec(meta.config_yaml, r.path);
        model = std::make_unique<ModelStack>(spec);
        detail = fmt::format("model '{}', {} parameters", spec.name, model->graph().trainable_count());
        return Problems{};
      }))
    return r;
  attempt("position", [&](std::string& detail) {
    Problems p = metadata_problems(meta, spec);
    LrSchedule sched(spec.train.schedule, spec.train.optimizer.lr, 1, spec.train.epochs);
    sched.load_state(meta.schedule);
    detail =
        fmt::format("epoch {} of {}, {} schedule state fits", meta.epoch, spec.train.epochs, spec.train.schedule.type);
    return p;
  });
  attempt("parameters", [&](std::string& detail) {
    detail = fmt::format("{} tensors match the model", model->graph().params().size());
    return compare_parameters(model->graph(), *f);
  });
  attempt("optimizer", [&](std::string& detail) {
    detail = fmt::format("{} slots match", spec.train.optimizer.type);
    return compare_optimizer(model->graph(), spec, *f);
  });
  return r;
}

json to_json(const VerifyReport& r) {
  json checks = json::array();
  for (const VerifyCheck& c : r.checks) checks.push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
  return json{{"path", r.path}, {"valid", r.ok()}, {"problems", r.problems}, {"checks", checks}};
}

std::string to_text(const VerifyReport& r) {
  std::string out = fmt::format("checkpoint: {}\n", r.path);
  for (const VerifyCheck& c : r.checks)
    out += fmt::format("  {:<4}  {:<10}  {}\n", c.ok ? "ok" : "FAIL", c.name, c.detail);
  out += r.ok() ? "valid\n" : fmt::format("invalid: {}\n", r.problems.front());
  return out;
}

bool DiffReport::tensors_equal() const {
  if (!only_a.empty() || !only_b.empty()) return false;
  return std::all_of(tensors.begin(), tensors.end(), [](const TensorDiff& t) { return t.identical; });
}

bool DiffReport::metadata_equal() const { return config.empty() && metadata.empty(); }

std::string DiffReport::verdict() const {
  if (!tensors_equal()) return "tensors differ";
  if (metadata_equal()) return "identical";
  std::vector<std::string> keys;
  if (!config.empty()) keys.push_back("config");
  for (const auto& d : metadata) keys.push_back(d.key);
  return "tensors equal; metadata differs: " + join(keys);
}

namespace {

TensorDiff diff_tensor(const SafetensorsFile& a, const SafetensorsFile& b, const std::string& name) {
  TensorDiff d;
  d.name = name;
  const TensorInfo &x = a.info(name), &y = b.info(name);
  if (x.dtype != y.dtype || x.shape != y.shape) {
    d.problem = fmt::format("{} {} vs {} {}", dtype_name(x.dtype), shape_text(x.shape), dtype_name(y.dtype),
                            shape_text(y.shape));
    return d;
  }
  d.identical = x.bytes() == 0 || std::memcmp(a.data(name), b.data(name), x.bytes()) == 0;
  if (!is_float_dtype(x.dtype)) return d;
  d.compared = true;
  if (d.identical) return d;
  std::vector<float> u = a.read_f32(name), v = b.read_f32(name);
  const double inf = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < u.size(); ++i) {
    double p = u[i], q = v[i];
    if (std::isnan(p) && std::isnan(q)) continue;
    if (!std::isfinite(p) || !std::isfinite(q)) {
      if (p != q) d.max_abs = d.max_rel = inf;
      continue;
    }
    double diff = std::fabs(p - q), scale = std::max(std::fabs(p), std::fabs(q));
    d.max_abs = std::max(d.max_abs, diff);
    if (scale > 0) d.max_rel = std::max(d.max_rel, diff / scale);
  }
  return d;
}

std::vector<ConfigDifference> diff_maps(const std::map<std::string, std::string>& a,
                                        const std::map<std::string, std::string>& b) {
  std::vector<ConfigDifference> out;
  for (const auto& [k, v] : a)
    if (!skip_metadata_key(k) && (!b.count(k) || b.at(k) != v))
      out.push_back({k, v, b.count(k) ? b.at(k) : "<absent>"});
  for (const auto& [k, v] : b)
    if (!skip_metadata_key(k) && !a.count(k)) out.push_back({k, "<absent>", v});
  return out;
}

}  // namespace

DiffReport diff_checkpoints(const std::string& path_a, const std::string& path_b) {
  DiffReport r;
  r.path_a = resolve_checkpoint_path(path_a);
  r.path_b = resolve_checkpoint_path(path_b);
  SafetensorsFile a = SafetensorsFile::open(r.path_a), b = SafetensorsFile::open(r.path_b);
  const auto &ma = a.metadata(), &mb = b.metadata();
  if (ma.count("config") && mb.count("config")) {
    r.have_configs = true;
    r.config = diff_configs(parse_yaml(ma.at("config"), r.path_a + " (config)"),
                            parse_yaml(mb.at("config"), r.path_b + " (config)"));
  }
  r.metadata = diff_maps(ma, mb);
  for (const TensorInfo& t : a.tensors()) {
    if (b.contains(t.name))
      r.tensors.push_back(diff_tensor(a, b, t.name));
    else
      r.only_a.push_back(t.name);
  }
  for (const TensorInfo& t : b.tensors())
    if (!a.contains(t.name)) r.only_b.push_back(t.name);
  return r;
}

json to_json(const DiffReport& r) {
  auto diffs = [](const std::vector<ConfigDifference>& v) {
    json out = json::array();
    for (const auto& d : v) out.push_back({{"key", d.key}, {"a", d.before}, {"b", d.after}});
    return out;
  };
  json tensors = json::array();
  for (const TensorDiff& t : r.tensors) {
    json j{{"name", t.name}, {"identical", t.identical}};
    if (!t.problem.empty()) j["problem"] = t.problem;
    // JSON has no infinity: a NaN/Inf in one file only reads as null.
    auto value = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
    if (t.compared) j["max_abs"] = value(t.max_abs), j["max_rel"] = value(t.max_rel);
    tensors.push_back(j);
  }
  return json{{"a", r.path_a},
              {"b", r.path_b},
              {"tensors_equal", r.tensors_equal()},
              {"metadata_equal", r.metadata_equal()},
              {"identical", r.identical()},
              {"config", r.have_configs ? diffs(r.config) : json(nullptr)},
              {"metadata", diffs(r.metadata)},
              {"tensors", tensors},
              {"only_a", r.only_a},
              {"only_b", r.only_b}};
}

std::string to_text(const DiffReport& r) {
  std::string out = fmt::format("a: {}\nb: {}\n", r.path_a, r.path_b);
  size_t same = std::count_if(r.tensors.begin(), r.tensors.end(), [](const TensorDiff& t) { return t.identical; });
  out += fmt::format("tensors: {} in both ({} identical, {} differ), {} only in a, {} only in b\n", r.tensors.size(),
                     same, r.tensors.size() - same, r.only_a.size(), r.only_b.size());
  size_t longest = 0;
  for (const TensorDiff& t : r.tensors) longest = std::max(longest, t.name.size());
  const size_t w = name_column(longest);
  if (!r.tensors.empty()) out += fmt::format("  {:<{}}  {:>11}  {:>11}\n", "name", w, "max_abs", "max_rel");
  for (const TensorDiff& t : r.tensors) {
    std::string a = t.compared ? num(t.max_abs) : (t.identical ? "same" : "differ");
    std::string b = t.compared ? num(t.max_rel) : "";
    if (!t.problem.empty()) a = t.problem, b = "";
    out += fmt::format("  {:<{}}  {:>11}  {:>11}\n", t.name, w, a, b);
  }
  if (!r.only_a.empty()) out += "only in a: " + join(r.only_a) + "\n";
  if (!r.only_b.empty()) out += "only in b: " + join(r.only_b) + "\n";
  // Listed apart: a resumed or repeated run differs here (elapsed time, metrics) with equal tensors.
  auto list = [&](const char* what, const std::vector<ConfigDifference>& v) {
    out += fmt::format("{}: {} difference{}\n", what, v.size(), v.size() == 1 ? "" : "s");
    for (const auto& d : v) out += fmt::format("  {}: {} -> {}\n", d.key, clip(d.before, 200), clip(d.after, 200));
  };
  if (r.have_configs)
    list("config", r.config);
  else
    out += "config: not compared (a file has no config)\n";
  list("metadata", r.metadata);
  out += r.verdict() + "\n";
  return out;
}

}  // namespace cnn
