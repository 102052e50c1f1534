// Start-log and result texts of a training run (see run_summary.h).
#include "train/run_summary.h"

#include <fmt/format.h>

namespace cnn {

static std::string value_text(const Value& n) {
  if (n.is_scalar()) return n.text();
  if (n.is_list()) {
    std::string s;
    for (const Value& item : n.items()) s += (s.empty() ? "" : ", ") + value_text(item);
    return "[" + s + "]";
  }
  if (n.is_map()) return "{" + describe_section(n) + "}";
  return "null";
}

std::string describe_section(const Value& section) {
  std::string type, keys;
  for (const auto& [key, value] : section.entries()) {
    if (key == "type")
      type = value_text(value);
    else
      keys += (keys.empty() ? "" : ", ") + key + " " + value_text(value);
  }
  if (type.empty()) return keys;
  return keys.empty() ? type : type + " (" + keys + ")";
}

// The resolved config's section at `path`, or "" when it is not a map (never the case after
// parse_model_spec, which writes every default into the tree).
static std::string section_text(const Value& root, const std::vector<std::string>& path) {
  const Value* n = &root;
  for (const std::string& key : path) {
    const Value* next = nullptr;
    if (n->is_map())
      for (const auto& [k, v] : n->entries())
        if (k == key) next = &v;
    if (!next) return "";
    n = next;
  }
  return n->is_map() ? describe_section(*n) : "";
}

std::string describe_optimization(const ModelSpec& spec, double scaled_lr) {
  const TrainSpec& t = spec.train;
  std::string out = "optimizer: " + section_text(spec.config, {"train", "optimizer"});
  if (scaled_lr != t.optimizer.lr) out += fmt::format("; lr {} after train.lr_scaling {}", scaled_lr, t.lr_scaling);
  out += "\nschedule: " + section_text(spec.config, {"train", "schedule"});
  out += "\ngradient clipping: " +
         (t.clip_grad_norm > 0 ? fmt::format("global L2 norm at most {}", t.clip_grad_norm) : std::string("off"));
  const EarlyStoppingSpec& es = t.early_stopping;
  out += "\nearly stopping: " +
         (es.patience > 0 ? fmt::format("after {} epoch{} without a {} improvement by more than {}", es.patience,
                                        es.patience == 1 ? "" : "s", es.metric, es.min_delta)
                          : std::string("off"));
  out += "; best checkpoint by " + t.checkpoint.best_metric;
  return out;
}

std::string format_train_result(const TrainResult& r) {
  std::string out;
  if (r.has_test) {
    out += r.test.to_table();
    out += fmt::format("test accuracy: {:.2f}% ({} images)\n", 100 * r.test.top1, r.test.n);
  }
  out += "run directory: " + r.run_dir + "\n";
  if (!r.last_checkpoint.empty()) out += "checkpoint: " + r.last_checkpoint + "\n";
  if (!r.best_checkpoint.empty()) out += "best checkpoint: " + r.best_checkpoint + "\n";
  return out;
}

}  // namespace cnn
