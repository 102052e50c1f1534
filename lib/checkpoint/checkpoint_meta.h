// The __metadata__ of a cnn-train checkpoint (README "Checkpoints"): the format keys, the training
// position and state, read from hostile strings and range-checked against the config it carries.
// Trap: every number here reaches arithmetic later (world_size * batch, a duration cast of
// elapsed_s, loader cursors), so a value that parses is not yet a value that may be used: run
// metadata_problems before trusting one. JSON values are parsed with kMaxMetadataJsonDepth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model_spec.h"

namespace cnn {

inline constexpr const char* kCheckpointFormat = "cnn-train-checkpoint";
inline constexpr int kCheckpointVersion = 1;

// Limits of what a checkpoint may say (README "Checkpoints"); beyond them it is refused.
inline constexpr int kMaxMetadataJsonDepth = 16;           // nesting of a JSON metadata value
// Values of a file's JSON metadata values together (each is parsed alone, but they are kept
// together): the largest we write is the normalisation, 2 x channels numbers (channels up to
// kMaxDimension = 2^20). Each value built costs up to ~60 bytes: capped one by one, 7 values of
// 2^22 empty arrays (84 MB of header) made `cnn-ckpt inspect --json` die of bad_alloc under 4 GB.
inline constexpr size_t kMaxMetadataJsonValues = size_t(1) << 22;
inline constexpr int64_t kMaxWorldSize = int64_t(1) << 20;  // ranks that wrote it
inline constexpr int64_t kMaxMetaCount = int64_t(1) << 48;  // steps, batches, samples of an epoch
inline constexpr double kMaxElapsedSeconds = 1e9;           // ~31 years; int64 nanoseconds hold 292

struct CheckpointMeta {
  std::string config_yaml;   // resolved config of the run
  int64_t epoch = 0;         // epoch in progress (0-based); equals `epochs` when training ended
  int64_t next_batch = 0;    // first batch of `epoch` not yet trained (the data cursor)
  int64_t step = 0;          // optimizer steps done
  int64_t optimizer_steps = 0;
  std::map<std::string, std::string> schedule;  // LrSchedule::state()
  std::map<std::string, std::string> loss_scale;  // LossScaler::state() of an fp16 run; empty otherwise
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

// True when the metadata says it is a cnn-train checkpoint (format = kCheckpointFormat): then it
// must carry a checksum for every tensor and pass every check below.
bool has_checkpoint_format(const std::map<std::string, std::string>& metadata);

// Parses the metadata strings: format and version, integers, numbers, the JSON values (depth
// limited), and the ranges that need no config (world size, counts, finite elapsed time...).
// Throws cnn::Error naming `source` and the key.
CheckpointMeta parse_checkpoint_meta(const std::map<std::string, std::string>& metadata, const std::string& source);

// What is impossible about `meta` for the config it carries (`spec`): a position beyond
// train.epochs, fewer steps than epochs, more optimizer steps than steps, a data cursor or running
// sums beyond what the batches could hold, a seed other than train.seed, a normalisation that
// does not fit the input channels. Empty when none.
std::vector<std::string> metadata_problems(const CheckpointMeta& meta, const ModelSpec& spec);

}  // namespace cnn
