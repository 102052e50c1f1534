// Which checkpoints a run writes, and when (see checkpoint_policy.h).
#include "train/checkpoint_policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

namespace cnn {

namespace fs = std::filesystem;

bool CheckpointPolicy::improves(double metric) {
  const bool better = !m_has_best || (m_spec.best_metric == "val_loss" ? metric < m_best : metric > m_best);
  if (better) m_has_best = true, m_best = metric;
  return better;
}

std::vector<std::string> CheckpointPolicy::after_epoch(int64_t epoch, bool best) const {
  std::vector<std::string> names{"last"};
  if (best) names.push_back("best");
  if (m_spec.every_epochs > 0 && (epoch + 1) % m_spec.every_epochs == 0)
    names.push_back(fmt::format("epoch-{:04d}", epoch + 1));
  return names;
}

void CheckpointPolicy::write(const std::string& name, Executor& ex, Optimizer& opt, const CheckpointMeta& meta) {
  if (!enabled()) return;
  const std::string path = m_dir + "/" + name + ".safetensors";
  write_checkpoint(path, ex, &opt, meta);
  if (name == "last") m_last = path;
  if (name == "best") m_best_path = path;
  if (name.rfind("epoch-", 0) == 0) prune_epoch_checkpoints();
}

void CheckpointPolicy::prune_epoch_checkpoints() const {
  if (m_spec.keep_last <= 0) return;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(m_dir)) {
    std::string n = e.path().filename().string();
    if (n.rfind("epoch-", 0) == 0 && e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i + size_t(m_spec.keep_last) < files.size(); ++i) fs::remove(files[i]);
}

}  // namespace cnn
