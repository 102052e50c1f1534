// What `cnn-ckpt` reports about checkpoints: inspect (metadata and per-tensor statistics), verify
// (every check a resume would make, and more, collected rather than stopping at the first) and
// diff (per-tensor differences, and config and metadata differences listed apart), as text or JSON.
// Trap: inspect and diff read files that may not be cnn-train checkpoints (any safetensors file);
// only verify insists on the cnn-train format, so they must not call read_checkpoint().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/config_diff.h"

namespace cnn {

// Statistics of one tensor. For float dtypes (F32, F64, F16, BF16) min/max/mean/std are over
// the finite values (std is the population one, as numpy's default); others have no stats.
struct TensorStats {
  std::string name, dtype;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  uint64_t bytes = 0;
  bool has_stats = false;  // float dtype with at least one finite value
  bool is_float = false;
  double min = 0, max = 0, mean = 0, std = 0;
  int64_t nan = 0, inf = 0;
};

struct InspectReport {
  std::string path;
  uint64_t file_bytes = 0;
  nlohmann::json summary;         // the cnn-train metadata fields that are present, typed
  nlohmann::json other_metadata;  // metadata keys not otherwise shown (no checksums, no config)
  std::string config_yaml;        // "" when absent
  size_t checksums_matched = 0;
  bool cnn_train_format = false;     // metadata 'format' is ours: checksums and metadata are required
  std::string checksum_problem;      // "" when every present checksum matched (and, ours, none is missing)
  std::string metadata_problem;      // ours only: why eval/resume would refuse the metadata or config
  std::vector<TensorStats> tensors;  // file order
  bool ok() const { return checksum_problem.empty() && metadata_problem.empty(); }
};
// Opens any safetensors file (or RUN_DIR/checkpoints/last.safetensors); throws when it can't be read.
// A checksum mismatch, or a cnn-train checkpoint that read_checkpoint would refuse, is reported
// (ok() false), not thrown, so the table is still shown.
InspectReport inspect_checkpoint(const std::string& path_or_run_dir);
std::string to_text(const InspectReport& r);
nlohmann::json to_json(const InspectReport& r);

struct VerifyCheck {
  std::string name;  // header, checksums, metadata, config, position, parameters, optimizer
  bool ok = true;
  std::string detail;  // what was found (ok) or the problems (not ok)
};
struct VerifyReport {
  std::string path;
  std::vector<VerifyCheck> checks;    // in order; a check that could not run is absent
  std::vector<std::string> problems;  // "<check>: <problem>", first problem first
  bool ok() const { return problems.empty(); }
};
// Never throws for a bad file: every problem lands in the report.
VerifyReport verify_checkpoint(const std::string& path_or_run_dir);
std::string to_text(const VerifyReport& r);
nlohmann::json to_json(const VerifyReport& r);

// A tensor present in both files. max_rel is the largest |a - b| / max(|a|, |b|) (0 where both
// are 0), so it is symmetric and at most 2; a NaN or Inf in only one of the two counts as inf.
struct TensorDiff {
  std::string name;
  std::string problem;     // "" when comparable; else e.g. "shape [3] vs [4]"
  bool identical = false;  // byte for byte
  bool compared = false;   // float values compared (max_abs, max_rel valid)
  double max_abs = 0, max_rel = 0;
};
struct DiffReport {
  std::string path_a, path_b;
  bool have_configs = false;               // both files carry a config
  std::vector<ConfigDifference> config;    // a -> b
  std::vector<ConfigDifference> metadata;  // other metadata keys (no checksums, no config)
  std::vector<TensorDiff> tensors;         // names in both, a's file order
  std::vector<std::string> only_a, only_b;
  // Tensors: the same names, dtypes, shapes and bytes. Metadata: config and the other keys
  // (position, metrics, elapsed time...); checksums are not compared (they follow the bytes).
  bool tensors_equal() const;
  bool metadata_equal() const;
  bool identical() const { return tensors_equal() && metadata_equal(); }
  // "identical", "tensors equal; metadata differs: config, step, elapsed_s" or "tensors differ".
  std::string verdict() const;
};
DiffReport diff_checkpoints(const std::string& a, const std::string& b);
std::string to_text(const DiffReport& r);
nlohmann::json to_json(const DiffReport& r);

}  // namespace cnn
