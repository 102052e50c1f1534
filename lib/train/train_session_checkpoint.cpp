// Checkpoint parts of a training run: resume or initialise, the metadata of a checkpoint,
// writing last/best/epoch-N and keeping the last K.
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "train/train_session.h"

namespace cnn {

namespace fs = std::filesystem;

void TrainSession::resume_or_init() {
  if (m_resume) {
    const LoadedCheckpoint& c = *m_resume;
    load_weights(m_model->executor(), c.file, true);
    m_model->optimizer().load_state(read_optimizer_tensors(c.file));
    m_model->optimizer().set_step_count(c.meta.optimizer_steps);
    m_schedule->load_state(c.meta.schedule);
    m_epoch = c.meta.epoch;
    m_next_batch = c.meta.next_batch;
    m_step = c.meta.step;
    m_has_best = c.meta.has_best;
    m_best = c.meta.best_metric;
    m_last_metrics = c.meta.metrics;
    m_early.load_state(m_last_metrics.value("early_stopping", nlohmann::json()));
    m_t0 -= std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(c.meta.elapsed_s));
    if (m_next_batch > 0) {
      m_loss_sum = c.meta.epoch_progress.value("loss_sum", 0.0);
      m_correct = c.meta.epoch_progress.value("correct", 0.0);
      m_seen = c.meta.epoch_progress.value("seen", int64_t(0));
    }
    if (c.meta.dataset_fingerprint != m_data.fingerprint)
      spdlog::warn("the dataset differs from the checkpoint's ({} vs {}): the resumed run will not replay exactly",
                   m_data.fingerprint, c.meta.dataset_fingerprint);
    if (c.meta.seed != m_spec.train.seed)
      spdlog::warn("train.seed changed from {} to {}: data order and augmentation differ from the original run",
                   c.meta.seed, m_spec.train.seed);
    if (c.meta.world_size != m_world) convert_resume_cursor(c.meta.world_size);
    spdlog::info("resumed from '{}' at epoch {}, batch {} (step {})", c.path, m_epoch + 1, m_next_batch, m_step);
    return;
  }
  m_model->executor().init_params(m_spec.train.seed);
  if (m_init) {  // read, and at least one tensor matched, before the run directory was made
    const LoadedCheckpoint& c = *m_init;
    std::vector<std::string> problems = load_weights(m_model->executor(), c.file, false);
    spdlog::info("initialised weights from '{}'", c.path);
    for (const auto& p : problems) spdlog::warn("--init-from: {} (left at their initial values / ignored)", p);
  }
}

CheckpointMeta TrainSession::meta(int64_t epoch, int64_t next_batch) const {
  CheckpointMeta m;
  m.config_yaml = to_yaml(m_spec.config);
  m.epoch = epoch;
  m.next_batch = next_batch;
  m.step = m_step;
  m.schedule = m_schedule->state();
  m.seed = m_spec.train.seed;
  m.dataset_fingerprint = m_data.fingerprint;
  m.world_size = m_world;
  m.metrics = m_last_metrics;
  m.has_best = m_has_best;
  m.best_metric = m_best;
  m.normalization = {{"mean", m_norm.mean}, {"std", m_norm.std}};
  m.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_t0).count();
  if (next_batch > 0) m.epoch_progress = {{"loss_sum", m_loss_sum}, {"correct", m_correct}, {"seen", m_seen}};
  return m;
}

void TrainSession::save(const std::string& name, int64_t epoch, int64_t next_batch) {
  if (!m_run->enabled()) return;  // ranks other than 0
  phase(Phase::checkpoint);
  std::string path = m_run->checkpoints() + "/" + name + ".safetensors";
  write_checkpoint(path, m_model->executor(), &m_model->optimizer(), meta(epoch, next_batch));
  if (name == "last") m_result.last_checkpoint = path;
  if (name == "best") m_result.best_checkpoint = path;
}

void TrainSession::prune_epoch_checkpoints() {
  if (!m_run->enabled()) return;
  int64_t keep = m_spec.train.checkpoint.keep_last;
  if (keep <= 0) return;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(m_run->checkpoints())) {
    std::string n = e.path().filename().string();
    if (n.rfind("epoch-", 0) == 0 && e.path().extension() == ".safetensors") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (size_t i = 0; i + size_t(keep) < files.size(); ++i) fs::remove(files[i]);
}

}  // namespace cnn
