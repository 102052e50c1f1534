// Which checkpoints a run writes, and when (train.checkpoint): last at every epoch end and stop, best
// when best_metric improves (every epoch without a val split), epoch-NNNN every every_epochs keeping
// keep_last; and the best value so far, which checkpoints carry for a resume. Their contents are
// checkpoint_state.h's. Trap: only rank 0 writes; the other ranks (no directory) still track the
// best, since their val metrics are rank 0's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_state.h"
#include "config/model_spec.h"

namespace cnn {

class CheckpointPolicy {
 public:
  // `dir`: the run's checkpoints/ folder ("" on ranks other than 0: nothing is written).
  CheckpointPolicy(const CheckpointSpec& spec, std::string dir) : m_spec(spec), m_dir(std::move(dir)) {}

  bool enabled() const { return !m_dir.empty(); }
  const std::string& best_metric() const { return m_spec.best_metric; }
  // An epoch's value of best_metric: true when it beats the best so far (lower val_loss, higher
  // val_acc or val_macro_f1; the first value always does), and it becomes the best.
  bool improves(double metric);
  bool has_best() const { return m_has_best; }
  double best() const { return m_best; }
  void restore_best(bool has_best, double best) { m_has_best = has_best, m_best = best; }

  // The checkpoints due after epoch `epoch` (0-based), in the order they are written: last, best
  // when `best` (the epoch improved, or there is no val split), epoch-NNNN every every_epochs.
  std::vector<std::string> after_epoch(int64_t epoch, bool best) const;
  // Writes checkpoints/<name>.safetensors (nothing when disabled); after an epoch-NNNN one, removes
  // the oldest epoch-NNNN files beyond keep_last.
  void write(const std::string& name, Executor& ex, Optimizer& opt, const CheckpointMeta& meta);
  // The paths written last as last and best ("" before the first).
  const std::string& last_path() const { return m_last; }
  const std::string& best_path() const { return m_best_path; }

 private:
  void prune_epoch_checkpoints() const;

  CheckpointSpec m_spec;
  std::string m_dir;
  bool m_has_best = false;
  double m_best = 0;
  std::string m_last, m_best_path;
};

}  // namespace cnn
