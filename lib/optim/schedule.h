// The learning rate of every optimizer step of a run, from one owner: the base (train.optimizer.lr
// scaled by train.lr_scaling for the world size), the schedule and its linear warmup, plus
// reduce-on-plateau, which changes only at epoch ends. Trap: `step` counts with THIS schedule's steps_per_epoch; a run
// resumed with another steps_per_epoch (other world size or batch) must pass
// step_at(epoch, step_in_epoch), not the step count saved by the old run.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "config/model_spec.h"

namespace cnn {

// With spe = steps_per_epoch, e = step / spe (0-based epoch containing the step, integer division),
// T = epochs * spe and W = round(warmup_epochs * spe):
//   constant     base
//   step         base * gamma^floor(e / step_size)
//   multistep    base * gamma^(number of milestones <= e)     (milestones in 0-based epochs)
//   exponential  base * gamma^e
//   cosine       min_lr + (base - min_lr) * 0.5 * (1 + cos(pi * min(step, T) / T))
//   plateau      base * f, f the product of the reductions so far (floored at min_lr)
// and lr(step) = value(step) * (s + (1 - s) * step / W) for step < W (s = warmup_start_factor),
// value(step) from W on. Warmup applies to every type, plateau included.
// Plateau (torch.optim.lr_scheduler.ReduceLROnPlateau, threshold_mode 'rel', no cooldown): an epoch
// improves when metric < best*(1-threshold) for val_loss, metric > best*(1+threshold) for val_acc;
// after more than `patience` consecutive epochs without improvement the lr becomes
// max(lr*factor, min_lr) and the count restarts.
// train.lr_scaling for a data-parallel run of `world` ranks: none keeps lr, linear multiplies it by
// world, sqrt by sqrt(world).
double scaled_learning_rate(const std::string& rule, double lr, int64_t world);

class LrSchedule {
public:
  LrSchedule(const ScheduleSpec& spec, double base_lr, int64_t steps_per_epoch, int64_t epochs);
  // A training run's: the base is train.optimizer.lr scaled by train.lr_scaling for `world` ranks,
  // the schedule is train.schedule over train.epochs epochs of `steps_per_epoch` steps.
  LrSchedule(const TrainSpec& train, int64_t world, int64_t steps_per_epoch);

  double lr(int64_t step) const;
  // The learning rate of batch `step_in_epoch` of `epoch`, counted with this run's epoch length:
  // what the step is given, the progress line and the epoch's line show.
  double lr_at(int64_t epoch, int64_t step_in_epoch) const { return lr(step_at(epoch, step_in_epoch)); }
  double base_lr() const { return m_base_lr; }  // after train.lr_scaling, before schedule and warmup

  // Call after every epoch's validation, with strictly increasing epoch numbers. Only plateau
  // uses the metric (the spec's monitor: val_loss or val_acc).
  void on_epoch_end(int64_t epoch, double metric);

  int64_t step_at(int64_t epoch, int64_t step_in_epoch) const { return epoch * m_steps_per_epoch + step_in_epoch; }
  int64_t epoch_of(int64_t step) const { return step / m_steps_per_epoch; }
  int64_t warmup_steps() const { return m_warmup_steps; }
  int64_t total_steps() const { return m_steps_per_epoch * m_epochs; }
  const ScheduleSpec& spec() const { return m_spec; }

  // For checkpoint metadata: "type", "last_epoch", and for plateau "plateau_best",
  // "plateau_bad_epochs", "plateau_factor". Doubles are written in shortest round-trip form, so
  // load_state(state()) restores them bit for bit.
  std::map<std::string, std::string> state() const;
  // A missing or unreadable key, or state of another schedule type, is a cnn::Error.
  void load_state(const std::map<std::string, std::string>& state);

private:
  enum class Kind { constant, step, multistep, exponential, cosine, plateau };

  double value(int64_t step) const;
  bool improves(double metric) const;

  ScheduleSpec m_spec;
  Kind m_kind;
  double m_base_lr;
  int64_t m_steps_per_epoch;
  int64_t m_epochs;
  int64_t m_warmup_steps;
  int64_t m_last_epoch = -1;
  // plateau state
  double m_best;
  int64_t m_bad_epochs = 0;
  double m_factor = 1.0;
};

}  // namespace cnn
