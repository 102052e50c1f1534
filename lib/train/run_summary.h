// Texts of a training run that several places show: the start log's optimizer, schedule and
// clipping lines (read from the resolved config, so every key a type takes is shown with the value
// in force, defaults included), and the result a finished run prints, which train.log gets too.
#pragma once

#include <string>

#include "config/model_spec.h"
#include "train/trainer.h"

namespace cnn {

// "sgd (lr 0.01, momentum 0.9, nesterov true, weight_decay 0.0001)": a section's type, then its
// other keys in file order; `section` is a map node of the resolved config.
std::string describe_section(const Value& section);

// The start log's lines: optimizer (with the lr after train.lr_scaling when it differs), schedule,
// gradient clipping and early stopping.
std::string describe_optimization(const ModelSpec& spec, double scaled_lr);

// What `cnn-train` prints at the end: the test report (per-class table, confusion matrix) and test
// accuracy when there is one, the run directory and the checkpoints.
std::string format_train_result(const TrainResult& r);

}  // namespace cnn
