// The training loop of `cnn-train MODEL.yaml`: data, network, optimizer, schedule, evaluation
// per epoch, the run directory, checkpoints, resume, and stopping on SIGINT/SIGTERM; data-parallel
// over the ranks of a communicator when one is given (mpirun/srun), the plain loop otherwise.
// Trap: every random choice (shuffle, augmentation, dropout) is a pure function of the seed and
// the position (epoch, step, sample), so a resumed run replays exactly; keep it that way.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "eval/metrics.h"
#include "train/test_hooks.h"

namespace cnn {

class Communicator;

struct TrainOptions {
  std::string out_dir;      // empty: runs/<model>-<timestamp>
  std::string device = "auto";
  bool quiet = false;
  std::string resume;       // run directory or checkpoint
  bool overwrite = false;   // a fresh run may replace the run in out_dir (its files are removed first)
  std::string init_from;    // checkpoint: weights only
  std::string command_line; // for the printed resume command
  // The job's ranks (not owned). Null, or a single process nobody launched: the plain loop, with
  // no communication at all. Anything else (even one rank under mpirun) trains data-parallel.
  Communicator* comm = nullptr;
  // Data-parallel only: ends the job with a message and an exit code (the app prints it and
  // aborts every rank). Called for an error on this rank and, from the watchdog's thread, for a
  // dead or stalled rank. Null: the message goes to stderr and comm->abort(code).
  std::function<void(const std::string& message, int exit_code)> on_fatal;
  // The end-to-end tests' stop and kill hooks (cnn-train fills them from CNN_TEST_*); none by default.
  TestHooks test_hooks;
  // Phases the program timed before calling train_model, in order, for the start-up breakdown:
  // each ended at end_s (core/process_clock.h: seconds since the process start). A program that
  // ran MPI's initialisation marks it "MPI init"; none means a plain process.
  struct StartupMark {
    std::string name;
    double end_s = 0;
  };
  std::vector<StartupMark> startup_marks;
};

struct TrainResult {
  std::string run_dir;
  std::string last_checkpoint, best_checkpoint;
  bool has_test = false;
  EvalReport test;
  int64_t steps = 0;
  int exit_code = 0;  // 0, or 128 + signal when stopped by SIGINT/SIGTERM after a checkpoint
  // Why training ended: finished | max_steps | early_stopping | signal, or nothing_to_train (a
  // resume past its end: nothing was read or written).
  std::string end_reason;
};

TrainResult train_model(ModelSpec spec, const TrainOptions& options);

}  // namespace cnn
