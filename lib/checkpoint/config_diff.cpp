// Config flattening and the resume compatibility rule (see config_diff.h).
#include "checkpoint/config_diff.h"

#include <spdlog/spdlog.h>

#include "core/error.h"

namespace cnn {

static void flatten_into(const Value& n, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (n.is_scalar()) {
    out[prefix] = n.text();
  } else if (n.is_map()) {
    for (const auto& [k, v] : n.entries()) flatten_into(v, prefix.empty() ? k : prefix + "." + k, out);
  } else if (n.is_list()) {
    for (size_t i = 0; i < n.items().size(); ++i) flatten_into(n.items()[i], fmt::format("{}[{}]", prefix, i), out);
  } else {
    out[prefix] = "null";
  }
}

std::map<std::string, std::string> flatten_config(const Value& node) {
  std::map<std::string, std::string> out;
  flatten_into(node, "", out);
  return out;
}

std::vector<ConfigDifference> diff_configs(const Value& before, const Value& after) {
  auto a = flatten_config(before), b = flatten_config(after);
  std::vector<ConfigDifference> out;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) out.push_back({k, v, "<absent>"});
    else if (it->second != v) out.push_back({k, v, it->second});
  }
  for (const auto& [k, v] : b)
    if (!a.count(k)) out.push_back({k, "<absent>", v});
  return out;
}

static bool must_match(const std::string& key) {
  for (const char* p : {"input", "classes", "layers", "loss", "train.optimizer", "train.batch_size", "train.schedule"}) {
    std::string s(p);
    if (key == s || key.rfind(s + ".", 0) == 0 || key.rfind(s + "[", 0) == 0) return true;
  }
  return false;
}

void check_resume_compatible(const std::string& checkpoint_config_yaml, const ModelSpec& now, ResumeCheck when) {
  Value before = parse_yaml(checkpoint_config_yaml, "<checkpoint config>");
  std::vector<ConfigDifference> diffs = diff_configs(before, now.config);
  std::string refused;
  for (const auto& d : diffs) {
    const bool from_data = now.classes.empty() && d.after == "<absent>" && d.key.rfind("classes", 0) == 0;
    if (when == ResumeCheck::before_data && from_data) continue;
    if (must_match(d.key)) refused += fmt::format("\n  {}: checkpoint {}, now {}", d.key, d.before, d.after);
  }
  if (!refused.empty())
    throw ConfigError({now.file}, "",
                      "cannot resume: the model or optimizer differs from the checkpoint's (use --init-from to "
                      "start a new run from its weights):" + refused);
  if (when == ResumeCheck::after_data) return;
  for (const auto& d : diffs) {
    if (now.classes.empty() && d.key.rfind("classes", 0) == 0) continue;
    spdlog::info("resume: overriding {}: {} -> {}", d.key, d.before, d.after);
    if (d.key == "train.precision")
      spdlog::info("resume: the precision changes only how activations are stored and products taken; the FP32 "
                   "weights and optimizer state carry over unchanged");
    if (d.key == "train.epochs" && now.train.schedule.type == "cosine")
      spdlog::warn(
          "resume: the cosine schedule now spans {} epochs instead of {}, so the learning rate from here "
          "on differs from the original run's",
          d.after, d.before);
  }
}

}  // namespace cnn
