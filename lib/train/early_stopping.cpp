// Early stopping (see early_stopping.h).
#include "train/early_stopping.h"

#include <fmt/format.h>

namespace cnn {

bool EarlyStopping::update(int64_t epoch, double value) {
  if (!enabled()) return false;
  const bool lower_is_better = m_spec.metric == "val_loss";
  const bool improved = !m_has_best || (lower_is_better ? value < m_best - m_spec.min_delta
                                                        : value > m_best + m_spec.min_delta);
  if (improved) {
    m_has_best = true;
    m_best = value;
    m_best_epoch = epoch;
    m_bad_epochs = 0;
  } else {
    ++m_bad_epochs;
  }
  return should_stop();
}

std::string EarlyStopping::reason() const {
  return fmt::format("{} has not improved by more than {} for {} epoch{} (best {:.6g} after epoch {})", m_spec.metric,
                     m_spec.min_delta, m_bad_epochs, m_bad_epochs == 1 ? "" : "s", m_best, m_best_epoch);
}

nlohmann::json EarlyStopping::state() const {
  return {{"metric", m_spec.metric}, {"best", m_best}, {"best_epoch", m_best_epoch}, {"bad_epochs", m_bad_epochs}};
}

void EarlyStopping::load_state(const nlohmann::json& s) {
  if (!s.is_object() || s.value("metric", "") != m_spec.metric || !s.value("best_epoch", nlohmann::json()).is_number())
    return;
  m_best_epoch = s.value("best_epoch", int64_t(0));
  m_has_best = m_best_epoch > 0;
  m_best = s.value("best", 0.0);
  m_bad_epochs = s.value("bad_epochs", int64_t(0));
}

}  // namespace cnn
