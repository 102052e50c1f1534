// A seeded random training batch for step tests: standard normal inputs written into the
// executor's input, uniform labels returned (the same values for the same seed on every device).
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "graph/executor.h"

namespace cnn::test {

// Fills ex.input() (all max_batch rows) and returns n labels in [0, classes).
inline std::vector<int32_t> random_batch(Executor& ex, uint64_t seed, int64_t n, int64_t classes) {
  Rng rng(seed, static_cast<uint64_t>(RngStream::test));
  std::vector<float> x(size_t(ex.input().numel()));
  for (float& v : x) v = rng.normal();
  ex.input().copy_from(Tensor::from_vector(ex.input().shape(), x));
  std::vector<int32_t> labels(static_cast<size_t>(n));
  for (auto& y : labels) y = int32_t(rng.below(uint64_t(classes)));
  return labels;
}

}  // namespace cnn::test
