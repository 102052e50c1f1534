// Early stopping (train.early_stopping: {metric, patience, min_delta}): training stops after
// `patience` epochs in a row in which the monitored val metric did not improve on the best so far
// by more than min_delta (val_loss must fall, val_acc and val_macro_f1 must rise). patience 0 is
// off. Trap: the state travels in the epoch line of metrics.jsonl (and so in the checkpoint's
// last metrics), so a resumed run keeps counting where the interrupted one was.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "config/model_spec.h"

namespace cnn {

class EarlyStopping {
 public:
  explicit EarlyStopping(EarlyStoppingSpec spec) : m_spec(std::move(spec)) {}
  bool enabled() const { return m_spec.patience > 0; }
  // The metric's value after epoch `epoch` (1-based); true when training should stop now.
  bool update(int64_t epoch, double value);
  bool should_stop() const { return enabled() && m_bad_epochs >= m_spec.patience; }
  // "val_loss has not improved by more than 0.001 for 3 epochs (best 0.4123 after epoch 5)".
  std::string reason() const;
  // {"metric", "best", "best_epoch", "bad_epochs"}; load_state ignores an empty or other-metric state.
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  EarlyStoppingSpec m_spec;
  bool m_has_best = false;
  double m_best = 0;
  int64_t m_best_epoch = 0, m_bad_epochs = 0;
};

}  // namespace cnn
