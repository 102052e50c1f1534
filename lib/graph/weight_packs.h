// Weight packs of a training step: every 16-bit weight copy the layers' chosen rows read
// (Layer::weight_pack_requests: conv2d krsc/crsk/rsk by algorithm and direction, dense (K, C)), one
// copy per (parameter, dtype, layout) however many directions read it, laid out in one buffer. The
// executor allocates that buffer and a device table of the copies when it is built (after the
// autotuner fixed the algorithms), packs them all in one launch at the start of every training
// forward (inside a captured step, so a replay packs the weights the optimizer just wrote, a
// checkpoint load or a broadcast alike) and lets the layers' ops read them forward and backward.
// Off (train.prepack_weights: false, Graph::prepack_weights) every op packs its own per call, as
// before: the same roundings, so the same bits.
// Trap: an evaluation-mode forward packs nothing and its ops pack their own (the copies are fresh
// only from a training forward to its backward).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace cnn {

struct WeightPackCopy {
  int node = 0;
  int param = 0;  // index into Graph::params()
  WeightsBf16Dims dims{};
  DType dtype = DType::bf16;
  Bf16WeightLayout layout = Bf16WeightLayout::kcrs;
  int64_t offset = 0;  // bytes into the buffer, 256-aligned
  int64_t bytes = 0;   // the copy's own (2 per element)
};

struct WeightPackPlan {
  std::vector<WeightPackCopy> copies;
  // Per node: the layer's requests, each with the index of its copy in `copies`.
  struct Binding {
    WeightPackRequest request;
    int copy = 0;
  };
  std::vector<std::vector<Binding>> bindings;
  int64_t bytes = 0;  // the buffer
  bool empty() const { return copies.empty(); }
  // "14 copies (bf16: 5 krsc, 4 crsk, 3 rsk, 2 kcrs), 1.2 MiB, one launch a step", or "off (reason)".
  std::string describe() const;
  std::string off_reason;  // why there are none ("train.prepack_weights is false", ...)
};

// The copies of `graph` for a training executor at max_batch. None when !training (forward-only
// executors), when graph.prepack_weights() is off, or when no layer reads a 16-bit copy (f32, CPU).
WeightPackPlan plan_weight_packs(const Graph& graph, int64_t max_batch, bool training);

}  // namespace cnn
