// The autotuner: when the run's device is chosen, it resolves every conv2d layer's per-direction
// plan (conv_plan.h) and the backend of every `auto` layer that both cuda and cudnn support, by
// timing the candidates at the run's batch on scratch tensors (warm-up, then the median of a few
// timed repeats) and keeping the fastest; decisions are cached on disk (autotune_cache.h).
// Accuracy guard: while a conv direction is timed, each candidate's output on the timing operands
// (realistic scale, conv_accuracy.h) is compared with a trusted plain FP32 reference
// (cuda:implicit_gemm); a candidate more than `tolerance` (relative L2) away is excluded with a
// warning naming layer, direction, algorithm and error, so speed is never bought with accuracy
// silently. The tolerance is part of the cache key.
// Precision: a conv layer's candidates are the rows of its activations' dtype (Layer::dtype()),
// timed on operands of that dtype (bf16 or f16 channels-last activations, FP32 weights); bf16 and
// f16 candidates are held to kBf16AccuracyTolerance and kF16AccuracyTolerance against the FP32
// reference on the same 16-bit inputs.
// Every cuDNN choice is guarded, not only the timed ones: a cuDNN convolution algorithm that is
// the only candidate or is named by `algo:`, and every batchnorm, pooling or activation layer that
// runs on cuDNN (explicit `backend: cudnn`, train.backend cudnn, or measured against cuda under
// auto) is compared with our CUDA kernels on probe operands (layer_accuracy.h), each op with its
// tolerance (accuracy_tolerance.h). What a failure does: under auto the cuDNN candidate is
// excluded; under train.backend cudnn the layer is refused cuDNN with a warning and runs on our
// kernels (the preference says "where it can"); a layer's own `backend: cudnn` or an `algo:` name
// that fails is a ConfigError at the layer (the user asked for exactly that), which names the
// error and the tolerance (--autotune-tolerance raises every tolerance at once).
// Warm start: a cached conv decision is checked on its winner's row alone and the guard's passes
// are cached, so a start whose every decision is in the cache makes no probe operands
// (AutotuneStats::probe_sets) and asks cuDNN nothing about the algorithms that lost.
// Trap: a candidate that throws (or fails a CUDA call) is reported and excluded, never replaced
// silently; a sticky CUDA error (illegal address) poisons the context, so later candidates of the
// same run fail too and the run stops with every failure listed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "core/exec_context.h"
#include "graph/graph.h"
#include "tune/autotune_cache.h"
#include "tune/conv_accuracy.h"

namespace cnn {

struct AutotuneOptions {
  std::string cache_path;                          // "" = no disk cache
  size_t workspace_limit_bytes = size_t(1) << 30;  // --workspace-mb
  int warmup = 2;                                  // untimed runs per candidate
  int repeats = 5;                                 // timed runs; the median counts
  double tolerance = kConvAccuracyTolerance;       // --autotune-tolerance: largest relative L2 error
  bool tolerance_given = false;  // tolerance was set by the user: it replaces every op's own tolerance
  // Data-parallel runs: rank 0's decisions are the job's. When set, autotune_graph calls `share`
  // with this rank's decisions (autotune_decisions(); "" on a rank with tune = false) and applies
  // what it returns (rank 0's, e.g. an allgather's first entry) with apply_autotune_decisions.
  std::function<std::string(const std::string&)> share;
  bool tune = true;  // false: time nothing, take every decision from `share`
  // From a run's train.autotune keys; an empty cache path resolves at the edge
  // (resolve_autotune_cache_path: $CNN_AUTOTUNE_CACHE, $XDG_CACHE_HOME, $HOME).
  static AutotuneOptions from_spec(const AutotuneSpec& spec);
};

// One decision among `candidates`: `measure(name)` returns ms (throws on failure). On a cache hit
// whose winner is still a candidate nothing is timed. One candidate is taken without timing.
// When `rel_error` is given it is called right after a successful measure(name) and returns that
// candidate's relative L2 difference from the reference; one over `tolerance` (or NaN) is
// excluded with a warning. All excluded is an error (NoAccurateCandidate when some were excluded
// as inaccurate, else cnn::Error).
// tune_choice found candidates that ran but none within the accuracy tolerance.
class NoAccurateCandidate : public Error {
public:
  using Error::Error;
};

struct TuneOutcome {
  TuneRecord record;
  bool from_cache = false;
  std::vector<std::string> failures;  // "<candidate>: <error>"
  std::vector<std::string> excluded;  // "<candidate>: <rel_err> from the reference" (accuracy guard)
  double winner_rel_err = -1;         // the winner's measured error; -1 when not measured (cache, single)
  // "winner 0.123 ms, runner-up x 0.150 ms (1.22x)" plus " [cache]"
  std::string describe() const;
};
TuneOutcome tune_choice(const std::string& what, const std::vector<std::string>& candidates,
                        const std::function<double(const std::string&)>& measure, AutotuneCache& cache,
                        const std::string& key,
                        const std::function<double(const std::string&)>& rel_error = {},
                        double tolerance = kConvAccuracyTolerance);
// The same with a tolerance per candidate (tolerance_of(name)): under precision tf32 the TF32
// candidates get kTf32AccuracyTolerance, the FP32 ones keep theirs (accuracy_tolerance.h).
TuneOutcome tune_choice(const std::string& what, const std::vector<std::string>& candidates,
                        const std::function<double(const std::string&)>& measure, AutotuneCache& cache,
                        const std::string& key, const std::function<double(const std::string&)>& rel_error,
                        const std::function<double(const std::string&)>& tolerance_of);

// The cache key of one conv direction's decision: the machine (autotune_environment_key()), shape,
// direction, allowed backends, determinism, workspace limit, accuracy tolerance and precision (the
// layer's math mode, with the TF32 candidates' tolerance under tf32, and its activations' dtype,
// with the 16-bit candidates' tolerance under bf16 or f16: `bf16_tolerance` is that dtype's), so a
// decision made under another tolerance or precision (or before the guard existed) is never reused.
std::string autotune_conv_key(const std::string& env, const Conv2dShape& shape, ConvDir d,
                              const std::vector<std::string>& backends, bool deterministic, size_t workspace_limit,
                              double tolerance, MathMode math, double tf32_tolerance = kTf32AccuracyTolerance,
                              DType dtype = DType::f32, double bf16_tolerance = kBf16AccuracyTolerance);

// What one autotune_graph call decided and how (the start-up breakdown): decisions taken from the
// disk cache, timed (cache misses), and taken without timing (one candidate, an `algo:` name, the
// CPU's rule). A warm cache times nothing.
struct AutotuneStats {
  int cache_hits = 0, timed = 0, untimed = 0;
  // Probe operand sets made (a conv layer's ConvProbe, a cuda-vs-cudnn layer's timing operands, a
  // cuDNN layer's accuracy probe): none when every decision came from the cache.
  int probe_sets = 0;
  std::string cache_path;    // "" when there is no disk cache (CPU runs, cache "none")
  size_t cache_entries = 0;  // decisions the cache file held when read (every machine's)
};

// Resolves the conv plans and measured backends of `graph` on ctx at `batch`; returns one log line
// per decision (also logged). Throws ConfigError at the layer when an explicit algo cannot run.
// `stats`, when given, receives the counts above.
std::vector<std::string> autotune_graph(Graph& graph, const ExecContext& ctx, int64_t batch,
                                        const AutotuneOptions& options, AutotuneStats* stats = nullptr);

// The resolved decisions of `graph` as text: per conv2d layer "conv <layer> <forward algo>
// <backward_data algo> <backward_filter algo>", per measured-backend layer "backend <layer>
// <cuda|cudnn>", one per line. apply_autotune_decisions sets them on another rank's graph of the
// same model (throws when a layer or name does not match).
std::string autotune_decisions(const Graph& graph);
void apply_autotune_decisions(Graph& graph, const std::string& decisions, const std::string& how);

// Scratch bytes the plans of `graph` need at `batch`, and its layers' own (Layer::workspace_bytes):
// the workspace is grown to the largest.
size_t planned_workspace_bytes(Graph& graph, const ExecContext& ctx, int64_t batch);

// What algorithm `a` does when the layer allows `allowed`, for logs and tables: "" under fp32 (the
// only math there is), " [tf32]" (cuDNN) or " [fp32]" (our kernels) under tf32.
std::string conv_math_tag(const ConvAlgo& a, MathMode allowed);

// "forward cuda:implicit_gemm (autotuned: 1.31x over cudnn:gemm)"-style lines of one layer's
// plan, for tables ("forward cudnn:gemm [tf32] (...)" under tf32); empty for a layer without a
// conv plan.
std::vector<std::string> describe_conv_plan(const Layer& layer);

}  // namespace cnn
