// Internal to lib/train: one training run, its life (checks, run directory, resume, epochs, end) and
// what it holds: model stack, DataPipeline, LrSchedule, CheckpointPolicy and, data-parallel only,
// DistContext. Set-up and loop in trainer.cpp, life in train_session_run.cpp, resume and
// checkpoint contents in train_session_resume.cpp. Programs call train_model() (trainer.h).
#pragma once

#include <spdlog/details/log_msg_buffer.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_state.h"
#include "graph/timer.h"
#include "model/model_stack.h"
#include "optim/schedule.h"
#include "train/checkpoint_policy.h"
#include "train/data_pipeline.h"
#include "train/dist_context.h"
#include "train/early_stopping.h"
#include "train/run_dir.h"
#include "train/startup_breakdown.h"
#include "train/trainer.h"

namespace cnn {

class TrainSession {
 public:
  TrainSession(ModelSpec spec, const TrainOptions& opt) : m_spec(std::move(spec)), m_opt(opt) {}
  // The step's captured graphs go before the members: they may hold captured NCCL collectives,
  // whose communicator (m_dist's) is destroyed before the model stack (TrainStep::release_graphs).
  ~TrainSession() {
    if (m_model && m_model->has_step()) m_model->step().release_graphs();
  }
  TrainSession(const TrainSession&) = delete;
  TrainSession& operator=(const TrainSession&) = delete;
  TrainResult run();

 private:
  // train_session_run.cpp: the run's life around the loop.
  TrainResult run_session();
  void check_before_touching_anything();  // resume, device, --init-from: refused before any file is written
  std::string nothing_to_train_reason() const;  // why a resume past its end has nothing to train; "" if it has
  bool nothing_to_train();                 // a resume past its end: logs why
  void open_run_dir(const std::vector<spdlog::details::log_msg_buffer>& earlier);
  void finish();                           // test split, result in train.log, end line
  void append_end(const std::string& reason, nlohmann::json extra = nlohmann::json::object());
  void record_fatal(const std::string& message) noexcept;
  void log_test_hooks() const;
  // trainer.cpp: set-up and the loop.
  void start_data();   // the data read beside the device set-up where it can be (DataPipeline::start_load)
  void setup_data();   // the data read here (when start_data could not), then after_data()
  void finish_data();  // joins start_data's thread (once): its error, logs and the breakdown's phases
  void after_data();   // class names found by the data; the checks that need the data
  void setup_device();
  void setup_model();
  bool run_epochs();  // false when stopped by a signal
  StepStats plain_step(const Batch& b, double lr, int64_t epoch);
  StepStats dist_step(const Batch& b, double lr, int64_t epoch);
  [[noreturn]] void diverged(const Batch& b, int64_t epoch, double loss, const std::string& ranks);
  void report_skipped_step() const;
  void end_of_epoch(int64_t epoch, double train_loss, double train_acc, int64_t images, double seconds);
  // train_session_startup.cpp: the start-up breakdown's marks (host clock only, no device
  // synchronisation) and its report.
  void startup_begin();  // the process's phases before this session: loading, the program's marks
  void startup_mark(const std::string& name, const std::string& note = "", std::vector<StartupPart> parts = {});
  void startup_device_mark();
  void startup_autotune_mark(const AutotuneStats& stats);
  void startup_loaders_mark();
  void startup_data_marks();  // the wait for the data thread, and its work beside the device set-up
  void startup_before_step();  // each step until one runs at steady speed
  void startup_after_step();   // the same
  // The slowest layers of the timed first step; `rest` gets what the others and the step's rest were.
  std::vector<StartupPart> first_step_layer_parts(std::string& rest);
  std::optional<StartupPart> cudnn_handle_part();  // once, in the first mark after the handle was made
  nlohmann::json startup_report();  // logs the block (rank 0); the end line's "startup" object
  // train_session_resume.cpp: resume or initialise, and what a checkpoint of this run holds.
  void resume_or_init();
  void convert_resume_cursor(int64_t old_world);
  CheckpointMeta meta(int64_t epoch, int64_t next_batch) const;
  void save(const std::string& name, int64_t epoch, int64_t next_batch);

  void phase(Phase p) {
    if (m_dist) m_dist->phase(p);
  }
  int rank() const { return m_dist ? m_dist->rank() : 0; }
  int world() const { return m_dist ? m_dist->world() : 1; }
  const ExecContext& ctx() const { return m_model->ctx(); }
  double seconds_since_start() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_t0).count();
  }

  // Destroyed last to first: the data and the ranks' side go before the model stack they refer
  // to, the ranks' side (the watchdog's thread) before the run directory it logs to.
  ModelSpec m_spec;
  TrainOptions m_opt;
  std::optional<LoadedCheckpoint> m_resume;
  std::optional<LoadedCheckpoint> m_init;  // --init-from, read and matched before the run directory exists
  Device m_device = Device::cpu;           // resolved before any data is read
  std::atomic<RunDir*> m_fatal_log{nullptr};  // m_run for the watchdog's thread (null until it exists)
  // Graph, the rank's device (its local GPU or share of the cores), executor, optimizer, loss, step.
  std::unique_ptr<ModelStack> m_model;
  DataPipeline m_data{m_spec};
  std::unique_ptr<LrSchedule> m_schedule;  // every step's learning rate (lr_scaling, schedule, warmup)
  std::unique_ptr<RunDir> m_run;
  std::optional<CheckpointPolicy> m_ckpt;  // once the run directory is taken
  std::unique_ptr<DistContext> m_dist;     // data-parallel runs only
  std::optional<std::pair<int64_t, EvalReport>> m_epoch_test;  // eval.test_every_epoch: step and report
  // Where training stands: the next batch, the steps done, and the running sums of the epoch in
  // progress (a checkpoint carries them all).
  int64_t m_epoch = 0, m_next_batch = 0, m_step = 0;
  double m_loss_sum = 0, m_correct = 0;
  int64_t m_seen = 0;
  EarlyStopping m_early{EarlyStoppingSpec{}};
  std::string m_end_reason;
  int64_t m_start_step = 0;  // m_step when this segment began training
  bool m_started = false;    // this segment's start line is written (an end line may follow)
  nlohmann::json m_last_metrics = nlohmann::json::object();
  std::chrono::steady_clock::time_point m_t0 = std::chrono::steady_clock::now();
  double m_setup_s = 0;  // this process: seconds until data and device were ready (before autotuning)
  StartupBreakdown m_startup;
  bool m_cudnn_marked = false;
  std::unique_ptr<PerLayerTimer> m_first_step_layers;  // the first step's layers on a GPU (startup_before_step)
  double m_epoch_eval_s = 0, m_epoch_checkpoint_s = 0;  // end_of_epoch's, for the epoch's timing
  TrainResult m_result;
};

}  // namespace cnn
