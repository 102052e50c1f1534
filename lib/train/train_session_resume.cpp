// The checkpoint side of a training run: resume (weights, optimizer, schedule, where training
// stands, the best value so far; the data cursor moved to this run's world size) or initialise,
// and what this run's checkpoints hold. Which checkpoints are written, and when, is the
// CheckpointPolicy's.
#include <spdlog/spdlog.h>

#include <chrono>

#include "dist/world_math.h"
#include "train/train_session.h"

namespace cnn {

void TrainSession::resume_or_init() {
  if (m_resume) {
    const LoadedCheckpoint& c = *m_resume;
    load_weights(m_model->executor(), c.file, true);
    m_model->optimizer().load_state(read_optimizer_tensors(c.file));
    m_model->optimizer().set_step_count(c.meta.optimizer_steps);
    m_schedule->load_state(c.meta.schedule);
    if (LossScaler* scaler = m_model->loss_scaler()) {
      if (!c.meta.loss_scale.empty()) {
        try {
          scaler->load_state(m_model->ctx(), c.meta.loss_scale);
        } catch (const Error& e) {
          CNN_THROW("checkpoint '{}': {}", c.path, e.what());
        }
      } else {
        spdlog::info("the checkpoint has no loss scale (it was not an fp16 run): the scale starts at {}",
                     scaler->last().scale);
      }
    }
    m_epoch = c.meta.epoch;
    m_next_batch = c.meta.next_batch;
    m_step = c.meta.step;
    m_ckpt->restore_best(c.meta.has_best, c.meta.best_metric);
    m_last_metrics = c.meta.metrics;
    m_early.load_state(m_last_metrics.value("early_stopping", nlohmann::json()));
    m_t0 -= std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(c.meta.elapsed_s));
    if (m_next_batch > 0) {
      m_loss_sum = c.meta.epoch_progress.value("loss_sum", 0.0);
      m_correct = c.meta.epoch_progress.value("correct", 0.0);
      m_seen = c.meta.epoch_progress.value("seen", int64_t(0));
    }
    const std::string& fingerprint = m_data.splits().fingerprint;
    if (c.meta.dataset_fingerprint != fingerprint)
      spdlog::warn("the dataset differs from the checkpoint's ({} vs {}): the resumed run will not replay exactly",
                   fingerprint, c.meta.dataset_fingerprint);
    if (c.meta.seed != m_spec.train.seed)
      spdlog::warn("train.seed changed from {} to {}: data order and augmentation differ from the original run",
                   c.meta.seed, m_spec.train.seed);
    if (c.meta.world_size != world()) convert_resume_cursor(c.meta.world_size);
    spdlog::info("resumed from '{}' at epoch {}, batch {} (step {})", c.path, m_epoch + 1, m_next_batch, m_step);
    return;
  }
  // A fresh run's weights were initialised during the set-up (setup_model), while the data was read.
  if (m_init) {  // read, and at least one tensor matched, before the run directory was made
    const LoadedCheckpoint& c = *m_init;
    std::vector<std::string> problems = load_weights(m_model->executor(), c.file, false);
    spdlog::info("initialised weights from '{}'", c.path);
    for (const auto& p : problems) spdlog::warn("--init-from: {} (left at their initial values / ignored)", p);
  }
}

// The checkpoint's cursor counts global batches of its own world size: move it to ours at the
// same sample position, or to the end of the epoch when no batch boundary falls there.
void TrainSession::convert_resume_cursor(int64_t old_world) {
  const int64_t world = this->world();
  const int64_t batch = m_spec.train.batch_size, n = m_data.splits().train.size(), old_global = batch * old_world;
  const int64_t old_batches = m_spec.data.drop_last ? n / old_global : (n + old_global - 1) / old_global;
  CursorMove mv = convert_data_cursor(m_epoch, m_next_batch, batch, old_world, world, old_batches,
                                      m_data.batches_per_epoch());
  if (mv.exact) {
    spdlog::info(
        "the checkpoint was written by {} rank(s), this run has {}: data cursor batch {} of {} samples -> "
        "batch {} of {} samples (sample {} of epoch {})",
        old_world, world, m_next_batch, old_global, mv.next_batch, batch * world, mv.position, m_epoch + 1);
  } else {
    spdlog::warn(
        "the checkpoint was written by {} rank(s), this run has {}: epoch {} stopped after {} samples, "
        "which is no multiple of the new global batch {}; the rest of epoch {} is skipped and training "
        "continues at the next epoch boundary",
        old_world, world, m_epoch + 1, mv.position, batch * world, m_epoch + 1);
  }
  m_next_batch = mv.next_batch;
}

CheckpointMeta TrainSession::meta(int64_t epoch, int64_t next_batch) const {
  CheckpointMeta m;
  m.config_yaml = to_yaml(m_spec.config);
  m.epoch = epoch;
  m.next_batch = next_batch;
  m.step = m_step;
  m.schedule = m_schedule->state();
  if (const LossScaler* scaler = m_model->loss_scaler()) m.loss_scale = scaler->state();
  m.seed = m_spec.train.seed;
  m.dataset_fingerprint = m_data.splits().fingerprint;
  m.world_size = world();
  m.metrics = m_last_metrics;
  m.has_best = m_ckpt->has_best();
  m.best_metric = m_ckpt->best();
  const Normalization& norm = m_data.normalization();
  m.normalization = {{"mean", norm.mean}, {"std", norm.std}};
  m.elapsed_s = seconds_since_start();
  if (next_batch > 0) m.epoch_progress = {{"loss_sum", m_loss_sum}, {"correct", m_correct}, {"seen", m_seen}};
  return m;
}

void TrainSession::save(const std::string& name, int64_t epoch, int64_t next_batch) {
  if (!m_ckpt->enabled()) return;  // ranks other than 0
  phase(Phase::checkpoint);
  m_ckpt->write(name, m_model->executor(), m_model->optimizer(), meta(epoch, next_batch));
}

}  // namespace cnn
