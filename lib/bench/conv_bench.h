// `cnn-bench conv`: every registered convolution implementation on every point of sweep files
// and/or model layers, per direction: median time (after warm-up; CUDA events on the GPU), TFLOP/s,
// share of the measured FP32 peak, workspace, which was fastest, and rel_err: the relative L2
// difference of its output from the reference on the same operands (conv_accuracy.h:
// cuda:implicit_gemm on the GPU, the float64 CPU reference for cpu algorithms); per point the best
// of ours against the best of cuDNN, overall and among the accurate ones (rel_err within the
// tolerance), and per group the geometric mean of both ratios. --precision tf32 lets the rows that
// honour it (cuDNN) use TF32 tensor cores; each row says the math it did ("precision") and is
// accurate within that math's tolerance (accuracy_tolerance.h: conv_tolerance).
// Time box (conv_timebox.h): --cutoff abandons a hopeless candidate after one timed run,
// --max-seconds-per-point and --max-seconds bound a point and the run, --spread stops repeating
// once the runs agree; each row says how many timed runs it has. A point whose shape an earlier
// point had (a sweep passing through its base shape) copies that point's rows (copy_of).
// Trap: an implementation that cannot run a point is a row with a status, never dropped, so
// every table and CSV has the same implementations for every point.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tune/conv_accuracy.h"
#include "bench/conv_sweep.h"

namespace cnn {

struct ConvBenchResult;

struct ConvBenchOptions {
  std::string device = "auto";   // auto | cpu | cuda
  std::string impl_glob = "*";   // shell-style pattern on names ("cuda:*", "*winograd*")
  std::string direction = "all"; // all | forward | backward_data | backward_filter
  int warmup = -1, repeats = -1; // -1: the point's (sweep file defaults)
  size_t workspace_limit_bytes = size_t(1) << 30;
  double tolerance = kConvAccuracyTolerance;  // --autotune-tolerance: rel_err up to this is accurate
  bool tolerance_given = false;  // the user's tolerance: it replaces the TF32 rows' own as well
  MathMode math = MathMode::fp32;  // --precision: what the implementations are allowed
  double cutoff = 0, max_seconds_per_point = 0, spread = 0;  // the time box (conv_timebox.h); 0: off
  double max_seconds = 0;  // --max-seconds: no point starts after this many seconds (0: no limit)
  bool dedupe = true;      // a point with an earlier point's shape copies its rows
  std::set<std::pair<std::string, std::string>> done;  // (point, direction) pairs left out (--append)
  // Called after each point with the result so far and the index of that point's first row.
  std::function<void(const ConvBenchResult&, size_t first_row)> on_rows;
};

struct ConvBenchRow {
  std::string group, point, impl, direction;
  Conv2dShape shape;
  // ok | abandoned (>Xx best) | time box | cannot implement | workspace over limit | failed: <why>
  std::string status = "ok";
  double ms = 0, tflops = 0, peak_share = 0;  // set when has_time()
  int runs = 0;           // timed runs behind ms
  double wall_s = 0;      // wall time of its runs and its accuracy check
  std::string copy_of;    // the point whose measurement this row copies ("" when measured here)
  size_t workspace_bytes = 0;
  bool fastest = false;
  double rel_err = -1;  // from the reference; -1 when not measured (status not ok, or no reference)
  MathMode math = MathMode::fp32;     // what the implementation did (ConvAlgo::math_used)
  double tolerance = kConvAccuracyTolerance;  // rel_err up to this is accurate (per the row's math)
  bool accurate() const { return rel_err >= 0 && rel_err <= tolerance; }
  bool has_time() const { return status == "ok" || status == "time box" || status.rfind("abandoned", 0) == 0; }
  bool may_win() const { return status == "ok" || status == "time box"; }  // abandoned ones never win
};

struct ConvBenchSummary {
  std::string group, point, direction;
  std::string best_ours, best_cudnn;  // "" when none ran
  double ours_ms = 0, cudnn_ms = 0;
  double ratio = 0;  // cudnn_ms / ours_ms: > 1 means ours is faster; 0 when either is missing
  // The same among implementations whose rel_err is within the tolerance.
  std::string accurate_ours, accurate_cudnn;
  double accurate_ours_ms = 0, accurate_cudnn_ms = 0, accurate_ratio = 0;
};

struct ConvBenchResult {
  std::string device;
  std::string precision = "fp32";  // --precision of the run; rows carry the math each did
  double peak_tflops = 0, peak_gb_per_s = 0;  // 0 on the CPU (not measured)
  std::vector<ConvBenchRow> rows;
  std::vector<ConvBenchSummary> summaries;
  double tolerance = kConvAccuracyTolerance;
  std::vector<std::pair<std::string, double>> group_geomean;  // per group, of the ratios present
  std::vector<std::pair<std::string, double>> group_geomean_accurate;  // of the accurate ratios
  double wall_s = 0;
  int points_timed = 0, points_copied = 0, pairs_skipped = 0;  // skipped: in `done`
  std::vector<std::string> not_run;  // points not started: --max-seconds ran out
  std::string to_table() const;
  std::string to_csv() const;
  static std::string csv_header();
  std::string csv_rows(size_t first_row) const;  // rows [first_row, end)
  nlohmann::json to_json() const;
};

bool glob_match(const std::string& pattern, const std::string& text);
// The (layer, direction) pairs of a CSV that to_csv wrote (for --append); throws when its header is
// not csv_header()'s.
std::set<std::pair<std::string, std::string>> conv_csv_pairs(const std::string& csv_text, const std::string& what);
ConvBenchResult bench_conv(const std::vector<ConvPoint>& points, const ConvBenchOptions& options);

}  // namespace cnn
