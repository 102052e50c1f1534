// The training loop of `cnn-train MODEL.yaml`: data, network, optimizer, schedule, evaluation
// per epoch, the run directory, checkpoints, resume, and stopping on SIGINT/SIGTERM.
// Trap: every random choice (shuffle, augmentation, dropout) is a pure function of the seed and
// the position (epoch, step, sample), so a resumed run replays exactly; keep it that way.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "train/metrics.h"

namespace cnn {

struct TrainOptions {
  std::string out_dir;      // empty: runs/<model>-<timestamp>
  std::string device = "auto";
  bool quiet = false;
  std::string resume;       // run directory or checkpoint
  std::string init_from;    // checkpoint: weights only
  std::string command_line; // for the printed resume command
};

struct TrainResult {
  std::string run_dir;
  std::string last_checkpoint, best_checkpoint;
  bool has_test = false;
  EvalReport test;
  int64_t steps = 0;
  int exit_code = 0;  // 0, or 128 + signal when stopped by SIGINT/SIGTERM after a checkpoint
};

TrainResult train_model(ModelSpec spec, const TrainOptions& options);

}  // namespace cnn
