// The per-layer table of `cnn-train validate` (and the trainer's start-up log): output shapes,
// parameters, FLOPs, activation bytes, and the predicted training memory at a batch size.
#pragma once

#include <cstdint>
#include <string>

#include "config/model_spec.h"
#include "graph/graph.h"

namespace cnn {

struct MemoryEstimate {
  int64_t params_bytes = 0;
  int64_t grads_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t buffers_bytes = 0;
  int64_t activations_bytes = 0;        // planned arena (with reuse)
  int64_t activations_naive_bytes = 0;  // every tensor separately
  int64_t input_bytes = 0;
  int64_t packed_weights_bytes = 0;     // 16-bit weight copies packed once a step (weight_packs.h)
  int64_t total() const;  // checked: throws cnn::Error when the sum does not fit
};

// Optimizer state slots per parameter for the configured optimizer (sgd with momentum: 1, adam: 2, ...).
int optimizer_slots(const OptimizerSpec& opt);
MemoryEstimate estimate_training_memory(const Graph& graph, const ModelSpec& spec, int64_t batch);
std::string format_model_table(const Graph& graph, const ModelSpec& spec, int64_t batch);
std::string format_bytes(double bytes);  // "1.5 MiB"

}  // namespace cnn
