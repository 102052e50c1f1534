// A model stack trained step by step on seeded random batches, for tests that compare two
// configurations of one model (a fold, a layout): each step's loss, then the parameters, gradients,
// buffers and evaluation outputs read back, and compared (rel_l2, same_bits). Build: the spec and stack here, then the caller places
// the stack (and autotunes, folds, ...), then build_executor, then build_step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "config/model_spec.h"
#include "data/dataset.h"
#include "model/model_stack.h"
#include "support/catch.h"
#include "support/random_batch.h"

namespace cnn::test {

struct StepRun {
  StepRun(ModelSpec s, int64_t batch_size, int64_t class_count)
      : spec(std::move(s)), stack(spec), batch(batch_size), classes(class_count) {}

  // The executor for `batch`, its parameters initialised from `seed`.
  void build_executor(uint64_t seed) { stack.build_executor(batch).init_params(seed); }
  // Optimizer, loss and step, uncaptured (a captured step would replay, not rerun, its first batch).
  void build_step() {
    stack.build_optimizer(spec.train.optimizer);
    stack.build_loss(spec.loss, none);
    stack.build_step(0.0, loss_scale_for(spec.train));
    stack.step().set_cuda_graph(false, "test");
  }

  // One training step on the batch of seed s; its loss.
  double run(uint64_t s) {
    const std::vector<int32_t> labels = random_batch(stack.executor(), 7 + s, batch, classes);
    return stack.step().run(labels.data(), batch, 0.05, s, 1).loss;
  }
  std::vector<float> params() { return sync(stack.executor().params()); }
  std::vector<float> grads() { return sync(stack.executor().grads()); }
  std::vector<float> buffers() { return sync(stack.executor().buffers()); }
  // Evaluation mode (running statistics) on the batch of seed s.
  std::vector<float> eval(uint64_t s) {
    random_batch(stack.executor(), 100 + s, batch, classes);
    stack.executor().forward(batch, false, 0, 0);
    return sync(stack.executor().output());
  }
  std::vector<float> sync(const Tensor& t) {
    stack.device().synchronize();
    return t.to_vector();
  }

  Dataset none;
  ModelSpec spec;
  ModelStack stack;
  int64_t batch, classes;
};

// Relative L2 distance of a from b, and whether two float vectors hold the same bits.
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), n += double(b[i]) * b[i];
  return std::sqrt(d / std::max(n, 1e-30));
}
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace cnn::test
