// Evaluation of a network over a loader: probabilities (averaged over the ten crops when the
// loader makes them), unweighted cross-entropy of the averaged probabilities, and the metrics.
#pragma once

#include <string>
#include <vector>

#include "data/loader.h"
#include "graph/executor.h"
#include "eval/metrics.h"

namespace cnn {

EvalReport evaluate(Executor& ex, Loader& loader, const std::vector<std::string>& class_names,
                    const std::string& split, double label_smoothing = 0.0);

// Copies a loader batch into the executor's input (host to the executor's device), stored as f32.
void load_batch_input(Executor& ex, const Batch& batch);

}  // namespace cnn
