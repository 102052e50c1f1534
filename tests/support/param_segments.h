// The optimizer segments of a graph's trainable parameters, as the trainer builds them, for tests
// that set up an optimizer by hand.
#pragma once

#include <vector>

#include "graph/graph.h"
#include "optim/optimizer.h"

namespace cnn::test {

inline std::vector<ParamSegment> trainable_segments(const Graph& graph) {
  std::vector<ParamSegment> segs;
  for (const ParamEntry& e : graph.params())
    if (e.trainable) segs.emplace_back(e.name, e.offset, e.shape.numel(), e.decay, e.shape);
  return segs;
}

}  // namespace cnn::test
