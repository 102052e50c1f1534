// The whole training state in one safetensors checkpoint (DESIGN.md): parameters and buffers by
// name in PyTorch layout, optimizer slots as optim.<param>.<slot>, and __metadata__ with the
// format version, resolved config, position (epoch, data cursor, step), schedule state, RNG
// seed, dataset fingerprint, world size, metrics and a CRC-32C per tensor.
// Trap: RNG "state" is just the seed: every draw is counter-based on (epoch, step, sample).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "graph/executor.h"
#include "optim/optimizer.h"

namespace cnn {

inline constexpr const char* kCheckpointFormat = "cnn-train-checkpoint";
inline constexpr int kCheckpointVersion = 1;

struct CheckpointMeta {
  std::string config_yaml;   // resolved config of the run
  int64_t epoch = 0;         // epoch in progress (0-based); equals `epochs` when training ended
  int64_t next_batch = 0;    // first batch of `epoch` not yet trained (the data cursor)
  int64_t step = 0;          // optimizer steps done
  int64_t optimizer_steps = 0;
  std::map<std::string, std::string> schedule;  // LrSchedule::state()
  uint64_t seed = 0;
  std::string dataset_fingerprint;
  int64_t world_size = 1;
  nlohmann::json metrics = nlohmann::json::object();  // last epoch's metrics line
  double best_metric = 0;    // best value of checkpoint.best_metric so far
  bool has_best = false;
  // Running train loss/accuracy sums of the epoch in progress, so a resumed epoch reports the
  // same train_loss as an uninterrupted one: {"loss_sum", "correct", "seen"}.
  nlohmann::json epoch_progress = nlohmann::json::object();
  // The input normalisation the run trained with: {"mean": [..], "std": [..]} per channel, in
  // 0..1 pixel units (so a model can be used without its training data).
  nlohmann::json normalization = nlohmann::json::object();
  double elapsed_s = 0;  // training time so far, so a resumed run's elapsed_s continues
};

// Writes atomically (temp file, fsync, rename). The optimizer may be null (weights only).
void write_checkpoint(const std::string& path, Executor& ex, Optimizer* opt, const CheckpointMeta& meta);

// Opens a checkpoint (a file, or a run directory meaning its checkpoints/last.safetensors),
// verifies its checksums and parses its metadata. Errors name the file and the problem.
struct LoadedCheckpoint {
  std::string path;
  SafetensorsFile file;
  CheckpointMeta meta;
};
LoadedCheckpoint read_checkpoint(const std::string& path_or_run_dir);
// The metadata part of read_checkpoint (format, version, position, schedule, RNG, metrics);
// checksums are not looked at. Errors name file.source().
CheckpointMeta read_checkpoint_meta(const SafetensorsFile& file);
std::string resolve_checkpoint_path(const std::string& path_or_run_dir);

// Loads parameters and buffers by name. strict: every tensor of the graph must be present with
// the same shape (else one error listing missing, unexpected and mismatched tensors). Not
// strict (--init-from): loads what matches and returns the list of problems for the log.
std::vector<std::string> load_weights(Executor& ex, const SafetensorsFile& file, bool strict);

// The optimizer slots of a checkpoint (optim.* tensors) as CPU tensors.
std::map<std::string, Tensor> read_optimizer_tensors(const SafetensorsFile& file);

}  // namespace cnn
