// The whole training state in one safetensors checkpoint (README "Checkpoints"): parameters and
// buffers by name in PyTorch layout, optimizer slots as optim.<param>.<slot>, and __metadata__
// with the format version, resolved config, position (epoch, data cursor, step), schedule state,
// RNG seed, dataset fingerprint, world size, metrics and a CRC-32C per tensor.
// Trap: RNG "state" is just the seed: every draw is counter-based on (epoch, step, sample).
// Trap: a file is hostile until read_checkpoint has checked checksums, metadata and config.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "config/model_spec.h"
#include "checkpoint/checkpoint_meta.h"
#include "graph/executor.h"
#include "optim/optimizer.h"

namespace cnn {

// Writes atomically (temp file, fsync, rename). The optimizer may be null (weights only).
void write_checkpoint(const std::string& path, Executor& ex, Optimizer* opt, const CheckpointMeta& meta);

// Opens a cnn-train checkpoint (a file, or a run directory meaning its
// checkpoints/last.safetensors) and refuses it unless: it has our format metadata, every tensor
// has a checksum and every checksum matches, the metadata parses within its limits, the config it
// carries passes what `cnn-train validate` checks (validated_checkpoint_spec), and the metadata
// fits that config (metadata_problems). Errors name the file and the problem.
struct LoadedCheckpoint {
  std::string path;
  SafetensorsFile file;
  CheckpointMeta meta;
  bool ours = true;  // false: a plain safetensors file (read_weights_checkpoint only); meta is empty
};
LoadedCheckpoint read_checkpoint(const std::string& path_or_run_dir);
// For --init-from: a cnn-train checkpoint is read_checkpoint's; any other safetensors file (no
// format metadata) is accepted with the checksums it has verified, and a warning logged when it
// has none.
LoadedCheckpoint read_weights_checkpoint(const std::string& path_or_run_dir);
// The metadata part of read_checkpoint (parse_checkpoint_meta on the file's metadata); checksums
// and config are not looked at. Errors name file.source().
CheckpointMeta read_checkpoint_meta(const SafetensorsFile& file);
// The config a checkpoint carries, with `overrides` applied, put through the checks of
// `cnn-train validate`: it parses, its graph builds, its per-layer table (shapes, parameter
// counts, memory at train.batch_size) can be computed. ConfigError/Error naming "<path> (config)".
ModelSpec validated_checkpoint_spec(const std::string& config_yaml, const std::string& path,
                                    const std::vector<std::string>& overrides = {});
std::string resolve_checkpoint_path(const std::string& path_or_run_dir);

// Tensor names a checkpoint problem lists before "and N more": a file may hold any number.
inline constexpr size_t kNamesShown = 10;

// Loads parameters and buffers by name. strict: every tensor of the graph must be present with
// the same shape (else one error listing missing, unexpected and mismatched tensors). Not
// strict (--init-from): loads what matches and returns the list of problems for the log.
std::vector<std::string> load_weights(Executor& ex, const SafetensorsFile& file, bool strict);

// The optimizer slots of a checkpoint (optim.* tensors) as CPU tensors.
std::map<std::string, Tensor> read_optimizer_tensors(const SafetensorsFile& file);

}  // namespace cnn
