// Activation memory plan: every activation and activation-gradient tensor gets an interval on a
// timeline (forward of node i at time i, loss at L, backward of node i at 2L - i) and a byte
// range in one arena; tensors whose intervals overlap never share bytes (greedy first-fit by
// decreasing size). Trap: the plan is for a maximum batch; smaller batches use the same offsets.
// A fused activation (GraphNode::fused_into) plans nothing: its views alias its producer's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnn {

class Graph;

struct PlannedTensor {
  std::string what;     // "act conv1", "grad conv1"
  int64_t size = 0;     // floats
  int first = 0, last = 0;  // inclusive timeline interval
  int64_t offset = 0;   // floats into the arena
};

struct MemoryPlan {
  std::vector<PlannedTensor> activations;  // index = node
  std::vector<PlannedTensor> gradients;    // index = node (size 0 for nodes not needing one)
  int64_t arena_size = 0;                  // floats
  int64_t naive_size = 0;                  // floats without reuse (for reporting)
};

// training = false plans a forward-only pass (activations die after their last forward reader).
MemoryPlan plan_memory(const Graph& graph, int64_t max_batch, bool training);

// Exposed for tests: assigns offsets to tensors with intervals; returns the arena size.
int64_t assign_offsets(std::vector<PlannedTensor*>& tensors, int64_t align);

}  // namespace cnn
