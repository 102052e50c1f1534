// Learning-rate schedules: closed forms per step (see schedule.h) and the plateau state machine.
#include "optim/schedule.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <vector>

#include "core/error.h"

namespace cnn {

namespace {

constexpr double kPi = 3.14159265358979323846;
// ReduceLROnPlateau ignores reductions smaller than this (PyTorch's eps).
constexpr double kMinLrChange = 1e-8;

std::string format_double(double v) { return fmt::format("{}", v); }

double parse_double(const std::map<std::string, std::string>& state, const std::string& key) {
  auto it = state.find(key);
  CNN_CHECK(it != state.end(), "schedule state has no '{}'", key);
  const char* text = it->second.c_str();
  char* end = nullptr;
  double v = std::strtod(text, &end);  // "inf" and "-inf" included (the initial best)
  CNN_CHECK(end != text && *end == '\0', "schedule state '{}': '{}' is not a number", key,
            it->second);
  return v;
}

int64_t parse_int(const std::map<std::string, std::string>& state, const std::string& key) {
  auto it = state.find(key);
  CNN_CHECK(it != state.end(), "schedule state has no '{}'", key);
  const char* text = it->second.c_str();
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text, &end, 10);
  CNN_CHECK(end != text && *end == '\0' && errno != ERANGE, "schedule state '{}': '{}' is not an integer", key,
            it->second);
  return static_cast<int64_t>(v);
}

}  // namespace

double scaled_learning_rate(const std::string& rule, double lr, int64_t world) {
  CNN_CHECK(world >= 1, "world size {}", world);
  if (rule == "none") return lr;
  if (rule == "linear") return lr * double(world);
  if (rule == "sqrt") return lr * std::sqrt(double(world));
  CNN_THROW("train.lr_scaling is '{}', expected none, linear or sqrt", rule);
}

LrSchedule::LrSchedule(const TrainSpec& train, int64_t world, int64_t steps_per_epoch)
    : LrSchedule(train.schedule, scaled_learning_rate(train.lr_scaling, train.optimizer.lr, world), steps_per_epoch,
                 train.epochs) {}

LrSchedule::LrSchedule(const ScheduleSpec& spec, double base_lr, int64_t steps_per_epoch, int64_t epochs)
    : m_spec(spec), m_base_lr(base_lr), m_steps_per_epoch(steps_per_epoch), m_epochs(epochs) {
  static const std::vector<std::string> types{"constant", "step", "multistep", "exponential", "cosine", "plateau"};
  const std::string& t = spec.type;
  if (t == "constant") m_kind = Kind::constant;
  else if (t == "step") m_kind = Kind::step;
  else if (t == "multistep") m_kind = Kind::multistep;
  else if (t == "exponential") m_kind = Kind::exponential;
  else if (t == "cosine") m_kind = Kind::cosine;
  else if (t == "plateau") m_kind = Kind::plateau;
  else CNN_THROW("unknown schedule type '{}' (known: constant, step, multistep, exponential, cosine, plateau){}", t,
                 did_you_mean(t, types));

  CNN_CHECK(steps_per_epoch > 0, "schedule: steps_per_epoch must be > 0, got {}", steps_per_epoch);
  CNN_CHECK(epochs > 0, "schedule: epochs must be > 0, got {}", epochs);
  CNN_CHECK(base_lr >= 0.0 && std::isfinite(base_lr), "schedule: lr must be finite and >= 0, got {}", base_lr);
  CNN_CHECK(spec.warmup_epochs >= 0.0, "schedule: warmup_epochs must be >= 0, got {}", spec.warmup_epochs);
  CNN_CHECK(spec.warmup_start_factor >= 0.0 && spec.warmup_start_factor <= 1.0,
            "schedule: warmup_start_factor must be in [0, 1], got {}", spec.warmup_start_factor);
  CNN_CHECK(spec.min_lr >= 0.0, "schedule: min_lr must be >= 0, got {}", spec.min_lr);
  if (m_kind == Kind::step) CNN_CHECK(spec.step_size > 0, "schedule step: step_size must be > 0, got {}", spec.step_size);
  if (m_kind == Kind::step || m_kind == Kind::multistep || m_kind == Kind::exponential) {
    CNN_CHECK(spec.gamma > 0.0, "schedule {}: gamma must be > 0, got {}", t, spec.gamma);
  }
  if (m_kind == Kind::multistep) {
    for (size_t i = 0; i < spec.milestones.size(); ++i) {
      CNN_CHECK(spec.milestones[i] >= 0 && (i == 0 || spec.milestones[i] > spec.milestones[i - 1]),
                "schedule multistep: milestones must be increasing epochs >= 0, got {} at position {}",
                spec.milestones[i], i);
    }
  }
  if (m_kind == Kind::plateau) {
    CNN_CHECK(spec.monitor == "val_loss" || spec.monitor == "val_acc",
              "schedule plateau: monitor must be val_loss or val_acc, got '{}'", spec.monitor);
    CNN_CHECK(spec.factor > 0.0 && spec.factor < 1.0, "schedule plateau: factor must be in (0, 1), got {}",
              spec.factor);
    CNN_CHECK(spec.patience >= 0, "schedule plateau: patience must be >= 0, got {}", spec.patience);
    CNN_CHECK(spec.threshold >= 0.0, "schedule plateau: threshold must be >= 0, got {}", spec.threshold);
  }
  m_warmup_steps = std::llround(spec.warmup_epochs * static_cast<double>(steps_per_epoch));
  m_best = spec.monitor == "val_acc" ? -std::numeric_limits<double>::infinity()
                                     : std::numeric_limits<double>::infinity();
}

double LrSchedule::value(int64_t step) const {
  const int64_t e = step / m_steps_per_epoch;
  const ScheduleSpec& s = m_spec;
  switch (m_kind) {
    case Kind::constant:
      return m_base_lr;
    case Kind::step:
      return m_base_lr * std::pow(s.gamma, static_cast<double>(e / s.step_size));
    case Kind::multistep: {
      auto passed = std::upper_bound(s.milestones.begin(), s.milestones.end(), e) - s.milestones.begin();
      return m_base_lr * std::pow(s.gamma, static_cast<double>(passed));
    }
    case Kind::exponential:
      return m_base_lr * std::pow(s.gamma, static_cast<double>(e));
    case Kind::cosine: {
      const double total = static_cast<double>(total_steps());
      const double t = static_cast<double>(std::min(step, total_steps()));
      return s.min_lr + (m_base_lr - s.min_lr) * 0.5 * (1.0 + std::cos(kPi * t / total));
    }
    case Kind::plateau:
      return m_base_lr * m_factor;
  }
  return m_base_lr;
}

double LrSchedule::lr(int64_t step) const {
  CNN_CHECK(step >= 0, "schedule: step must be >= 0, got {}", step);
  double v = value(step);
  if (step < m_warmup_steps) {
    const double s = m_spec.warmup_start_factor;
    v *= s + (1.0 - s) * static_cast<double>(step) / static_cast<double>(m_warmup_steps);
  }
  return v;
}

bool LrSchedule::improves(double metric) const {
  if (m_spec.monitor == "val_acc") return metric > m_best * (1.0 + m_spec.threshold);
  return metric < m_best * (1.0 - m_spec.threshold);
}

void LrSchedule::on_epoch_end(int64_t epoch, double metric) {
  CNN_CHECK(epoch > m_last_epoch, "schedule: on_epoch_end({}) after epoch {} was already counted", epoch,
            m_last_epoch);
  m_last_epoch = epoch;
  if (m_kind != Kind::plateau) return;
  if (improves(metric)) {
    m_best = metric;
    m_bad_epochs = 0;
    return;
  }
  if (++m_bad_epochs <= m_spec.patience) return;
  m_bad_epochs = 0;
  const double old_lr = m_base_lr * m_factor;
  const double new_lr = std::max(old_lr * m_spec.factor, m_spec.min_lr);
  // old_lr > new_lr + eps implies m_base_lr > 0, so the division is safe.
  if (old_lr - new_lr > kMinLrChange) m_factor = new_lr / m_base_lr;
}

std::map<std::string, std::string> LrSchedule::state() const {
  std::map<std::string, std::string> out{{"type", m_spec.type}, {"last_epoch", std::to_string(m_last_epoch)}};
  if (m_kind == Kind::plateau) {
    out["plateau_best"] = format_double(m_best);
    out["plateau_bad_epochs"] = std::to_string(m_bad_epochs);
    out["plateau_factor"] = format_double(m_factor);
  }
  return out;
}

void LrSchedule::load_state(const std::map<std::string, std::string>& state) {
  auto it = state.find("type");
  CNN_CHECK(it != state.end(), "schedule state has no 'type'");
  CNN_CHECK(it->second == m_spec.type, "schedule state is for a '{}' schedule, this one is '{}'", it->second,
            m_spec.type);
  int64_t last_epoch = parse_int(state, "last_epoch");
  if (m_kind == Kind::plateau) {
    double best = parse_double(state, "plateau_best");
    int64_t bad = parse_int(state, "plateau_bad_epochs");
    double factor = parse_double(state, "plateau_factor");
    CNN_CHECK(bad >= 0 && factor > 0.0 && factor <= 1.0,
              "schedule state: plateau_bad_epochs {} or plateau_factor {} out of range", bad, factor);
    m_best = best;
    m_bad_epochs = bad;
    m_factor = factor;
  }
  m_last_epoch = last_epoch;
}

}  // namespace cnn
