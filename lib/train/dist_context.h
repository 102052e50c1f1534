// The data-parallel side of a training run: communicators (NCCL for GPU buffers), gradient and
// sync-batchnorm reducers, the watchdog, and the step every rank runs and agrees on. Only a
// data-parallel session holds one; the plain loop communicates nothing. Trap: every collective
// here must be called by every rank in the same order (a rank without samples still joins the
// step), or the job hangs until the watchdog ends it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "config/model_spec.h"
#include "dist/communicator.h"
#include "dist/grad_reducer.h"
#include "dist/watchdog.h"
#include "model/model_stack.h"
#include "train/data_pipeline.h"
#include "train/trainer.h"
#include "tune/autotune.h"

namespace cnn {

// What one step contributed, summed over the ranks in data-parallel runs.
struct StepStats {
  double loss_sum = 0, correct = 0;
  int64_t n = 0;
  int stop_signal = 0;  // agreed by every rank
};

class DistContext {
 public:
  // Starts the watchdog (dist.timeout_s; a collective). For a dead or stalled rank it calls, from
  // its own thread, `record_fatal` (the run's train.log), then options.on_fatal, then aborts the
  // job. `options` (its test hooks and on_fatal) and `spec` must outlive the context.
  DistContext(Communicator& comm, const ModelSpec& spec, const TrainOptions& options,
              std::function<void(const std::string&)> record_fatal);
  ~DistContext();
  DistContext(const DistContext&) = delete;
  DistContext& operator=(const DistContext&) = delete;

  Communicator& comm() const { return m_comm; }
  int rank() const { return m_comm.rank(); }
  int world() const { return m_comm.size(); }
  void phase(Phase p) { m_watch->set_phase(p); }
  void at(Phase p, int64_t step) { m_watch->set(p, step); }
  void finish() { m_watch->finish(); }  // training ended on this rank: the watchdog stops watching

  // Rank 0 tunes for the job; the others take its decisions instead of timing their own.
  void share_autotune(AutotuneOptions& tune);
  // Once the model stack and the loaders are built: gradient buckets in the order backward
  // finalises parameters, NCCL for GPU ranks, sync batchnorm, and the world-size arithmetic in
  // the log (`base_lr`: the learning rate after train.lr_scaling).
  void setup(ModelStack& model, const DataPipeline& data, double base_lr);
  // Every rank starts from rank 0's weights, and proves it: the same config and data everywhere,
  // then a checksum of the parameters and buffers compared across ranks.
  void start(ModelStack& model, const DataPipeline& data);
  // One global batch `b` (this rank's share; possibly empty) as step `step` + 1 of the run:
  // forward and backward with bucketed averaging, one small all-reduce in which the ranks agree on
  // the step (a stop signal, a non-finite loss anywhere) and sum its loss and hits, then the update
  // with `lr`. Before any update, a non-finite loss on some rank calls `diverged` with this rank's
  // loss (NaN when it was finite here) and the ranks that diverged ("0, 1"); it must throw.
  StepStats step(ModelStack& model, DataPipeline& data, const Batch& b, double lr, int64_t step,
                 const std::function<void(double loss, const std::string& ranks)>& diverged);
  // Each rank's batchnorm statistics saw only its own samples: their mean over the ranks.
  void average_buffers(ModelStack& model);
  // Rank 0's values to every rank (its val metrics drive every rank's choices).
  void broadcast_from_rank0(double* values, size_t n);
  // Rank 0's wait for gradient means after its backward ended, per step since the last call
  // (exposed communication); nothing when no step ran uncaptured since.
  std::optional<double> take_exposed_ms();

 private:
  Communicator& m_comm;
  const ModelSpec& m_spec;
  const TestHooks& m_hooks;
  std::unique_ptr<Watchdog> m_watch;
  std::unique_ptr<Communicator> m_nccl;  // device buffers of GPU ranks (null: m_comm reduces them)
  Communicator* m_reduce = nullptr;      // m_nccl or m_comm
  std::unique_ptr<GradReducer> m_reducer;
  std::unique_ptr<StatsReducer> m_stats_reducer;  // dist.sync_batchnorm (the layers hold it)
  int64_t m_steps_timed = 0;  // uncaptured steps since the last take_exposed_ms
};

}  // namespace cnn
