// One optimizer step on whatever device the executor runs on: forward, loss, backward,
// optional gradient clipping, update. Shared by the trainer and `cnn-bench model`, so the
// benchmark times exactly what training runs. The batch must already be in ex.input().
// Trap: on the GPU, run() synchronises once (to read the loss); the timing harness knows this.
#pragma once

#include <cstdint>
#include <vector>

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

 private:
  Executor& m_ex;
  const LossFunction& m_loss;
  Optimizer& m_opt;
  double m_clip;
  Tensor m_labels;  // (max_batch) int32 stored in float-sized slots on the executor's device
  Tensor m_probs;   // (max_batch, K)
  std::vector<float> m_host_probs;
};

}  // namespace cnn
