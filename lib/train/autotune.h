// The autotuner: when the run's device is chosen, it resolves every conv2d layer's per-direction
// plan (conv_plan.h) and the backend of every `auto` layer that both cuda and cudnn support, by
// timing the candidates at the run's batch on scratch tensors (warm-up, then the median of a few
// timed repeats) and keeping the fastest; decisions are cached on disk (autotune_cache.h).
// Trap: a candidate that throws (or fails a CUDA call) is reported and excluded, never replaced
// silently; a sticky CUDA error (illegal address) poisons the context, so later candidates of the
// same run fail too and the run stops with every failure listed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/exec_context.h"
#include "graph/graph.h"
#include "train/autotune_cache.h"

namespace cnn {

struct AutotuneOptions {
  std::string cache_path;                          // "" = no disk cache
  size_t workspace_limit_bytes = size_t(1) << 30;  // --workspace-mb
  int warmup = 2;                                  // untimed runs per candidate
  int repeats = 5;                                 // timed runs; the median counts
  // From CNN_AUTOTUNE_CACHE (path or none) and CNN_WORKSPACE_MB, else the defaults.
  static AutotuneOptions from_environment();
};

// One decision among `candidates`: `measure(name)` returns ms (throws on failure). On a cache hit
// whose winner is still a candidate nothing is timed. One candidate is taken without timing.
struct TuneOutcome {
  TuneRecord record;
  bool from_cache = false;
  std::vector<std::string> failures;  // "<candidate>: <error>"
  // "winner 0.123 ms, runner-up x 0.150 ms (1.22x)" plus " [cache]"
  std::string describe() const;
};
TuneOutcome tune_choice(const std::string& what, const std::vector<std::string>& candidates,
                        const std::function<double(const std::string&)>& measure, AutotuneCache& cache,
                        const std::string& key);

// Resolves the conv plans and measured backends of `graph` on ctx at `batch`; returns one log line
// per decision (also logged). Throws ConfigError at the layer when an explicit algo cannot run.
std::vector<std::string> autotune_graph(Graph& graph, const ExecContext& ctx, int64_t batch,
                                        const AutotuneOptions& options);

// Scratch bytes the plans of `graph` need at `batch` (the workspace is grown to this).
size_t planned_workspace_bytes(Graph& graph, const ExecContext& ctx, int64_t batch);

// "forward cuda:implicit_gemm (autotuned: 1.31x over cudnn:gemm)"-style lines of one layer's
// plan, for tables; empty for a layer without a conv plan.
std::vector<std::string> describe_conv_plan(const Layer& layer);

}  // namespace cnn
