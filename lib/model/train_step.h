// One optimizer step on whatever device the executor runs on: forward, loss, backward,
// optional gradient clipping, update. Shared by the trainer and `cnn-bench model`, so the
// benchmark times exactly what training runs. The batch must already be in ex.input().
// Data-parallel runs use the two halves instead: forward_backward() (gradients averaged over the
// ranks by a GradReducer as backward produces them), then, once the ranks agree the step is good,
// update(). Trap: on the GPU, run() and forward_backward() synchronise once (to read the loss).
// On the GPU run() queues the whole step (forward, loss, backward, clip, update) with every per-step
// value (learning rate and Adam's step via the optimizer constants, dropout seed and step, labels)
// in one device "step parameters" block filled by one copy from pinned memory, so the step can be
// captured in a CUDA graph: per batch size, the first step runs uncaptured (warm-up: workspaces,
// handles, algorithm choices), the second is captured, later ones replay it. Captured or not, the
// same kernels run in the same order, so results are bit-identical.
// fp16 runs add a loss scaler (optim/loss_scaler.h, set_loss_scaler): the loss gradient is scaled
// before backward; the gradients are checked and unscaled after it (after the means in
// data-parallel runs), before clipping; an overflow skips the update (the optimizer's step count is
// rolled back) and Result::skipped says so. On the GPU all of it is queued and captured with the
// step, and the scaler's state comes back in the same copy as the loss.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dist/grad_reducer.h"
#include "dist/watchdog.h"
#include "graph/executor.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"
#include "model/cuda_graph.h"
#include "model/loss.h"

namespace cnn {

class TrainStep {
 public:
  TrainStep(Executor& ex, const LossFunction& loss, Optimizer& optimizer, double clip_grad_norm);

  struct Result {
    double loss = 0;      // weighted batch loss; NaN/Inf when training diverged (no update then)
    int64_t correct = 0;  // top-1 hits in the batch
    bool skipped = false;  // fp16: the gradients overflowed, no update (the loss scaler's last() has the new scale)
  };
  // fp16: the scaler this step scales, checks and unscales with (null: none, every other precision).
  // Set before the first step; it must outlive the step.
  void set_loss_scaler(LossScaler* scaler) { m_scaler = scaler; }
  // labels (n) on the host.
  Result run(const int32_t* labels, int64_t n, double lr, uint64_t step, uint64_t seed);

  // Forward, loss and backward with every gradient bucket averaged over the ranks. This rank's
  // gradient is scaled by grad_weight first (n * world / global batch: 1 unless the global batch
  // is short). n == 0 (no samples for this rank) or a non-finite loss: zero gradients join every
  // bucket instead, so no rank waits forever; the caller then learns from the ranks' agreement
  // whether to update. The watchdog (may be null) hears the phases.
  // GPU ranks whose reducer runs on the device stream (NCCL; set_device_reduce) queue n > 0 steps
  // like run() does (labels and dropout seed/step from the step parameters block, loss on the
  // device) and, with CUDA graphs on and grad_weight 1, capture forward, loss, backward, the bucket
  // means (and sync batchnorm's sums) in a graph per batch size: the first step of a size runs
  // uncaptured, the second is captured, later ones replay it; update() stays uncaptured. There a
  // non-finite loss still runs backward and the means (NaN gradients): the ranks' agreement then
  // stops training before any update. A replay skips the reducer's host bookkeeping (the capture
  // left it reset) and the communicator's timing events (take_exposed_ms counts only steps that
  // ran uncaptured; last_step_replayed() tells which).
  Result forward_backward(const int32_t* labels, int64_t n, uint64_t step, uint64_t seed, GradReducer& reducer,
                          double grad_weight, Watchdog* watchdog);
  // Clipping (of the averaged gradients) and the optimizer step; nothing when the loss scaler found
  // the last forward_backward's gradients non-finite.
  void update(double lr);
  // dist.sync_batchnorm: a rank that skips forward or backward this step replays the layers'
  // reductions with zeros (Layer::join_sync_idle) in a full step's order, buckets included.
  void set_sync_batchnorm(bool on) { m_sync_batchnorm = on; }
  // The reducer's means are stream-ordered device collectives (NCCL): forward_backward may queue
  // and capture (see above). Off (default): the synchronous path (CPU ranks, MPI on GPU ranks).
  void set_device_reduce(bool on) { m_device_reduce = on; }
  bool last_step_replayed() const { return m_last_replayed; }  // the last forward_backward/run launched a graph

  // CUDA graphs for run() on a GPU (on by default; a CPU executor is always off). Turning it off
  // (reason: for the log) runs the same kernels uncaptured.
  void set_cuda_graph(bool on, const std::string& reason = "");
  // "on (step captured, N nodes)", "on (not captured yet)" or "off (reason)".
  std::string cuda_graph_status() const;
  // Destroys the captured graphs (a later step captures again). Trap: a graph that captured NCCL
  // collectives holds resources of the communicator (with NCCL's network transport, its proxy's
  // persistent operations), and ncclCommDestroy waits for them: destroy the graphs first.
  void release_graphs() noexcept { m_graphs.clear(); }
  bool cuda_graph_on() const { return m_graph_on; }
  int64_t graph_replays() const { return m_replays; }  // steps run by replaying a graph
  // The first capture's cost (the start-up breakdown): seconds from the start of the capture to
  // its end (the step queued on the host under capture), and the instantiation; -1 before one.
  struct CaptureTimes {
    double capture_s = -1, instantiate_s = -1;
  };
  const CaptureTimes& first_capture() const { return m_first_capture; }

 private:
  struct StepParams;  // the device-side per-step values (train_step.cpp)
  Result run_cuda(const int32_t* labels, int64_t n, double lr, uint64_t step, uint64_t seed);
  void enqueue_cuda(int64_t n);  // the whole step, queued; capturable
  // false: run `enqueue` uncaptured instead (capture failed; warm-up runs it and returns true)
  bool replay_cuda(int64_t n, const std::function<void()>& enqueue);
  void stage_step(const int32_t* labels, int64_t n, uint64_t step, uint64_t seed);
  Result forward_backward_cuda(const int32_t* labels, int64_t n, uint64_t step, uint64_t seed, GradReducer& reducer,
                               double grad_weight, Watchdog* watchdog);
  // forward, loss, backward with the reducer's hook, the wait for the means; capturable with NCCL
  void enqueue_dist(int64_t n, GradReducer& reducer, double grad_weight);
  // What both queued steps start and end with: the staged block to the device, forward, the loss
  // and its gradient; and the loss and probabilities back to pinned memory.
  void enqueue_forward_loss(int64_t n);
  void enqueue_results(int64_t n);
  Result read_staged_result(const int32_t* labels, int64_t n);
  Result read_result(const int32_t* labels, int64_t n, double loss);
  void join_sync_idle(bool forward_ran, uint64_t step, uint64_t seed, GradReducer& reducer);
  // The scaler's check of the (reduced) gradients, done synchronously (CPU, MPI path); sets r.skipped.
  void unscale_now(Result& r, double loss);
  Executor& m_ex;
  const LossFunction& m_loss;
  Optimizer& m_opt;
  double m_clip;
  bool m_sync_batchnorm = false;
  bool m_device_reduce = false;
  bool m_last_replayed = false;
  LossScaler* m_scaler = nullptr;
  Tensor m_labels;  // (max_batch) int32 stored in float-sized slots on the executor's device
  Tensor m_probs;   // (max_batch, K)
  std::vector<float> m_host_probs;
  // CUDA: step parameters (StepParams, then labels) staged in pinned memory and copied in one go
  // to m_dev_in; loss and probabilities copied back to m_stage_out; the clip norm.
  std::unique_ptr<PinnedBuffer> m_stage_in, m_stage_out;
  Tensor m_dev_in, m_dev_loss, m_dev_norm;
  size_t m_labels_offset = 0;  // bytes into m_stage_in / m_dev_in
  size_t m_scaler_offset = 0;  // bytes into m_stage_out: the loss scaler's state after the results
  uint64_t m_run_step = 0, m_run_seed = 0;
  bool m_graph_on = true;
  std::string m_graph_off_reason;
  std::map<int64_t, std::unique_ptr<CudaGraph>> m_graphs;  // by batch size
  DType m_graphs_input = DType::f32;  // the executor's input_dtype() they were captured with
  std::map<int64_t, size_t> m_warm;  // batch sizes warmed up -> workspace capacity after warm-up
  size_t m_graph_nodes = 0;
  int64_t m_replays = 0;
  CaptureTimes m_first_capture;
};

}  // namespace cnn
