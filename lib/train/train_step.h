// One optimizer step on whatever device the executor runs on: forward, loss, backward,
// optional gradient clipping, update. Shared by the trainer and `cnn-bench model`, so the
// benchmark times exactly what training runs. The batch must already be in ex.input().
// Data-parallel runs use the two halves instead: forward_backward() (gradients averaged over the
// ranks by a GradReducer as backward produces them), then, once the ranks agree the step is good,
// update(). Trap: on the GPU, run() and forward_backward() synchronise once (to read the loss).
#pragma once

#include <cstdint>
#include <vector>

#include "dist/grad_reducer.h"
#include "dist/watchdog.h"
#include "graph/executor.h"
#include "optim/optimizer.h"
#include "train/loss.h"

namespace cnn {

class TrainStep {
 public:
  TrainStep(Executor& ex, const LossFunction& loss, Optimizer& optimizer, double clip_grad_norm);

  struct Result {
    double loss = 0;      // weighted batch loss; NaN/Inf when training diverged (no update then)
    int64_t correct = 0;  // top-1 hits in the batch
  };
  // labels (n) on the host.
  Result run(const int32_t* labels, int64_t n, double lr, uint64_t step, uint64_t seed);

  // Forward, loss and backward with every gradient bucket averaged over the ranks. This rank's
  // gradient is scaled by grad_weight first (n * world / global batch: 1 unless the global batch
  // is short). n == 0 (no samples for this rank) or a non-finite loss: zero gradients join every
  // bucket instead, so no rank waits forever; the caller then learns from the ranks' agreement
  // whether to update. The watchdog (may be null) hears the phases.
  Result forward_backward(const int32_t* labels, int64_t n, uint64_t step, uint64_t seed, GradReducer& reducer,
                          double grad_weight, Watchdog* watchdog);
  // Clipping (of the averaged gradients) and the optimizer step.
  void update(double lr);

 private:
  Result read_result(const int32_t* labels, int64_t n, double loss);
  Executor& m_ex;
  const LossFunction& m_loss;
  Optimizer& m_opt;
  double m_clip;
  Tensor m_labels;  // (max_batch) int32 stored in float-sized slots on the executor's device
  Tensor m_probs;   // (max_batch, K)
  std::vector<float> m_host_probs;
};

}  // namespace cnn
