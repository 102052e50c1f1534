// Activation memory plan: every activation and activation-gradient tensor gets an interval on a
// timeline (forward of node i at time i, loss at L, backward of node i at 2L - i) and a byte
// range in one arena; tensors whose intervals overlap never share bytes (greedy first-fit by
// decreasing size). Sizes are bytes: each tensor takes its layer's dtype (Layer::dtype), so a
// bf16 layer's activations take half an f32 one's.
// Casts (mixed precision): where a layer reads an input of another dtype (the model input is f32;
// a bf16 layer after an f32 one, or the reverse), the plan holds a converted copy in the reader's
// dtype and layout (forward) and the reader's input gradient in its own dtype before it is converted
// into the producer's (backward); when the last layer is not f32, an f32 copy of the output and of
// its gradient for the loss. The executor runs the conversions (ops/convert.h).
// Trap: the plan is for a maximum batch; smaller batches use the same offsets.
// A fused activation (GraphNode::fused_into) plans nothing: its views alias its producer's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace cnn {

class Graph;

struct PlannedTensor {
  std::string what;     // "act conv1", "grad conv1"
  int64_t size = 0;     // bytes
  int first = 0, last = 0;  // inclusive timeline interval
  int64_t offset = 0;   // bytes into the arena
};

// One input of one layer read in another dtype than its producer's.
struct PlannedCast {
  int node = 0;      // the reader
  int slot = 0;      // which of its inputs
  int producer = 0;  // node index, or Graph::kModelInput
  DType from = DType::f32, to = DType::f32;
  PlannedTensor act;   // the input in the reader's dtype
  PlannedTensor grad;  // the reader's gradient of it, before conversion (size 0: none)
};

struct MemoryPlan {
  std::vector<PlannedTensor> activations;  // index = node
  std::vector<PlannedTensor> gradients;    // index = node (size 0 for nodes not needing one)
  std::vector<PlannedCast> casts;
  PlannedTensor output_f32, output_grad_f32;  // size 0 unless the last layer's dtype is not f32
  int64_t arena_size = 0;                  // bytes
  int64_t naive_size = 0;                  // bytes without reuse (for reporting)
  // The cast of input `slot` of `node`, or null.
  const PlannedCast* cast_of(int node, int slot) const;
};

// Offsets are aligned to this many bytes.
inline constexpr int64_t kArenaAlign = 256;

// training = false plans a forward-only pass (activations die after their last forward reader).
MemoryPlan plan_memory(const Graph& graph, int64_t max_batch, bool training);

// Exposed for tests: assigns offsets to tensors with intervals; returns the arena size.
int64_t assign_offsets(std::vector<PlannedTensor*>& tensors, int64_t align);

}  // namespace cnn
