// Internal to lib/train: the state of one training run, shared by trainer.cpp (set-up and the
// loop), train_session_checkpoint.cpp (resume and checkpoints) and train_session_dist.cpp (the
// data-parallel step). Not a public API: programs call train_model() (trainer.h).
#pragma once

#include "train/trainer.h"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>
#include "checkpoint/checksum.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "dist/bucket_math.h"
#include "dist/communicator.h"
#include "dist/gpu_info.h"
#include "dist/grad_reducer.h"
#include "dist/watchdog.h"
#include "dist/world_math.h"
#include "data/dataset.h"
#include "data/gpu_dataset.h"
#include "data/loader.h"
#include "data/normalize.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "graph/summary.h"
#include "optim/clip.h"
#include "optim/schedule.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/config_diff.h"
#include "model/model_stack.h"
#include "train/early_stopping.h"
#include "eval/evaluate.h"
#include "model/loss.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/signals.h"
#include "model/train_step.h"

namespace cnn {

// What one step contributed, summed over the ranks in data-parallel runs.
struct StepStats {
  double loss_sum = 0, correct = 0;
  int64_t n = 0;
  int stop_signal = 0;  // agreed by every rank
};

class TrainSession {
 public:
  TrainSession(ModelSpec spec, const TrainOptions& opt) : m_spec(std::move(spec)), m_opt(opt) {}
  TrainResult run();

 private:
  // train_session_run.cpp: the run's life around the loop.
  TrainResult run_session();
  void check_before_touching_anything();  // resume, device, --init-from: refused before any file is written
  bool nothing_to_train();                 // a resume past its end: logs why
  void open_run_dir(const std::vector<spdlog::details::log_msg_buffer>& earlier);
  void finish();                           // test split, result in train.log, end line
  void append_end(const std::string& reason, nlohmann::json extra = nlohmann::json::object());
  void record_fatal(const std::string& message) noexcept;
  void setup_data();
  void setup_device();
  void setup_model();
  void setup_data_parallel();
  void resume_or_init();
  void convert_resume_cursor(int64_t old_world);
  void start_data_parallel();
  bool run_epochs();  // false when stopped by a signal
  void setup_gpu_resident(const LoaderOptions& lo);
  bool next_batch(Batch& b, int64_t epoch);  // from the host loader or the GPU-resident data
  void load_input(const Batch& b);           // the batch into the executor's input
  StepStats plain_step(const Batch& b, double lr, int64_t epoch);
  StepStats dist_step(const Batch& b, double lr, int64_t epoch);
  [[noreturn]] void diverged(const Batch& b, int64_t epoch, double loss, const std::string& ranks);
  void phase(Phase p) {
    if (m_watch) m_watch->set_phase(p);
  }
  void read_dist_test_hook();
  const ExecContext& ctx() const { return m_model->ctx(); }
  void end_of_epoch(int64_t epoch, double train_loss, double train_acc, int64_t images, double seconds);
  std::unique_ptr<Loader> make_test_loader() const;
  void save(const std::string& name, int64_t epoch, int64_t next_batch);
  void prune_epoch_checkpoints();
  CheckpointMeta meta(int64_t epoch, int64_t next_batch) const;
  void read_test_hook();

  ModelSpec m_spec;
  TrainOptions m_opt;
  std::optional<LoadedCheckpoint> m_resume;
  std::optional<LoadedCheckpoint> m_init;  // --init-from, read and matched before the run directory exists
  Device m_device = Device::cpu;           // resolved before any data is read
  std::atomic<RunDir*> m_fatal_log{nullptr};  // m_run for the watchdog's thread (null until it exists)
  DataSplits m_data;
  Normalization m_norm;
  // Graph, the rank's device (its local GPU or share of the cores), executor, optimizer, loss, step.
  std::unique_ptr<ModelStack> m_model;
  std::unique_ptr<LrSchedule> m_schedule;  // every step's learning rate (lr_scaling, schedule, warmup)
  std::unique_ptr<Loader> m_train_loader, m_val_loader, m_test_loader;
  std::optional<std::pair<int64_t, EvalReport>> m_epoch_test;  // eval.test_every_epoch: step and report
  std::unique_ptr<GpuDataset> m_gpu_data;  // data.gpu_resident: training batches built on the GPU
  int64_t m_gpu_next = 0;                  // next batch of m_gpu_data in the epoch
  std::unique_ptr<RunDir> m_run;
  // Data-parallel state; m_comm is null on the plain path.
  Communicator* m_comm = nullptr;
  std::unique_ptr<Communicator> m_nccl;  // device buffers of GPU ranks (null: m_comm reduces them)
  Communicator* m_reduce_comm = nullptr;
  int64_t m_dist_steps_in_epoch = 0;  // data-parallel steps since the last epoch line
  std::unique_ptr<GradReducer> m_reducer;
  std::unique_ptr<StatsReducer> m_stats_reducer;  // dist.sync_batchnorm (the layers hold it)
  std::unique_ptr<Watchdog> m_watch;
  int m_rank = 0, m_world = 1;
  int m_test_stop_rank = -1;     // CNN_TEST_STOP_RANK: only this rank raises the signal (-1: all)
  int64_t m_test_kill_step = 0;  // CNN_TEST_KILL_AT_STEP on rank CNN_TEST_KILL_RANK
  int m_test_kill_rank = -1;
  bool m_test_kill_stall = false;
  int64_t m_epoch = 0, m_next_batch = 0, m_step = 0;
  double m_loss_sum = 0, m_correct = 0;  // running sums of the epoch in progress
  int64_t m_seen = 0;
  int64_t m_test_stop_step = 0;  // test hook (read_test_hook): raise m_test_stop_signal after this step
  int m_test_stop_signal = SIGTERM;
  bool m_has_best = false;
  double m_best = 0;
  EarlyStopping m_early{EarlyStoppingSpec{}};
  std::string m_end_reason;
  int64_t m_start_step = 0;  // m_step when this segment began training
  bool m_started = false;    // this segment's start line is written (an end line may follow)
  nlohmann::json m_last_metrics = nlohmann::json::object();
  std::chrono::steady_clock::time_point m_t0 = std::chrono::steady_clock::now();
  double m_setup_s = 0;  // this process: seconds until data and device were ready (before autotuning)
  TrainResult m_result;
};

}  // namespace cnn
