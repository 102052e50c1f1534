// libFuzzer target for checkpoint metadata: the strings of a valid checkpoint's __metadata__,
// overridden by the fuzz input, go through parse_checkpoint_meta and metadata_problems. Any
// exception but cnn::Error, a crash, a sanitizer report or an accepted value outside the limits is
// a finding. Input: byte 0 picks the config's epochs, batch size, channels and seed; the rest is
// key\0value\0... pairs replacing or adding metadata keys. Trap: the config is built in code, not
// parsed (the YAML reader has its own target), so only checkpoint_meta.cpp is under test here.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_util.h"
#include "checkpoint/checkpoint_meta.h"

using namespace cnn;

namespace {

[[noreturn]] void finding(const char* what) {
  std::fprintf(stderr, "fuzz_checkpoint_meta: %s\n", what);
  std::abort();
}

// What a one-epoch run of a 1-channel model at batch 16 writes (checksums do not matter here).
std::map<std::string, std::string> base_metadata() {
  return {{"format", kCheckpointFormat},
          {"format_version", std::to_string(kCheckpointVersion)},
          {"config", "name: fuzz\n"},
          {"epoch", "1"},
          {"next_batch", "0"},
          {"step", "4"},
          {"optimizer_steps", "4"},
          {"schedule", R"({"last_epoch":"0","type":"constant"})"},
          {"rng", R"({"seed":42,"generator":"philox4x32-10"})"},
          {"dataset_fingerprint", "train=64:2c105c6bfbee93a3"},
          {"world_size", "1"},
          {"metrics", R"({"epoch":1,"event":"epoch","val_acc":0.0625,"lr":0.05})"},
          {"epoch_progress", "{}"},
          {"normalization", R"({"mean":[0.48],"std":[0.2]})"},
          {"elapsed_s", "0.683323"},
          {"best_metric", "0.0625"}};
}

ModelSpec spec_for(uint8_t b) {
  const int64_t epochs[4] = {1, 3, int64_t(1) << 20, std::numeric_limits<int64_t>::max() / 2};
  const int64_t batches[4] = {1, 16, int64_t(1) << 30, std::numeric_limits<int64_t>::max() / 4};
  ModelSpec spec;
  spec.train.epochs = epochs[b & 3];
  spec.train.batch_size = batches[(b >> 2) & 3];
  spec.input.channels = 1 + ((b >> 4) & 3);
  spec.train.seed = (b >> 6) ? 42 : std::numeric_limits<uint64_t>::max();
  return spec;
}

// The seed corpus: edits a fuzzer would take long to find (CNN_FUZZ_WRITE_SEEDS=DIR).
void write_seeds(const std::string& dir) {
  using Edits = std::vector<std::pair<std::string, std::string>>;
  const std::vector<Edits> seeds{
      {},
      {{"next_batch", "2"}, {"epoch", "0"}, {"epoch_progress", R"({"loss_sum":2.5,"correct":3,"seen":8})"}},
      {{"world_size", "4611686018427387904"}},
      {{"metrics", "[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]"}},
      {{"normalization", R"({"mean":[0.5,0.5,0.5],"std":[0.25,0.25,0.25]})"}},
      {{"elapsed_s", "nan"}, {"best_metric", "1e308"}},
      {{"rng", R"({"seed":18446744073709551615})"}, {"step", "9"}},
  };
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::string bytes(1, char(0x45));  // epochs 3, batch 16, 1 channel, seed 42
    for (const auto& [k, v] : seeds[i]) bytes += k + '\0' + v + '\0';
    std::ofstream f(dir + "/seed-" + std::to_string(i), std::ios::binary);
    f << bytes;
  }
}

}  // namespace

CNN_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const ModelSpec spec = spec_for(data[0]);
  std::map<std::string, std::string> meta = base_metadata();
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  for (size_t at = 0; at < rest.size();) {
    size_t k_end = rest.find('\0', at);
    if (k_end == std::string::npos) break;
    size_t v_end = rest.find('\0', k_end + 1);
    if (v_end == std::string::npos) v_end = rest.size();
    meta[rest.substr(at, k_end - at)] = rest.substr(k_end + 1, v_end - k_end - 1);
    at = v_end + 1;
  }
  CheckpointMeta m;
  std::vector<std::string> problems;
  try {
    m = parse_checkpoint_meta(meta, "fuzz");
    problems = metadata_problems(m, spec);
  } catch (const Error&) {
    return 0;
  }
  // What was accepted is within the limits every reader relies on.
  if (m.world_size < 1 || m.world_size > kMaxWorldSize) finding("world_size outside its limits");
  for (int64_t v : {m.epoch, m.next_batch, m.step, m.optimizer_steps})
    if (v < 0 || v > kMaxMetaCount) finding("a count outside [0, 2^48]");
  if (!std::isfinite(m.elapsed_s) || m.elapsed_s < 0 || m.elapsed_s > kMaxElapsedSeconds) finding("elapsed_s");
  if (m.has_best && !std::isfinite(m.best_metric)) finding("best_metric not finite");
  if (!m.metrics.is_object() || !m.epoch_progress.is_object() || !m.normalization.is_object())
    finding("a JSON value that is not an object");
  (void)m.metrics.dump();  // depth-limited, so dumping cannot exhaust the stack
  if (problems.empty()) {
    int64_t global = 0, position = 0;
    if (m.epoch > spec.train.epochs || m.optimizer_steps > m.step || m.seed != spec.train.seed)
      finding("an impossible position or seed passed metadata_problems");
    if (__builtin_mul_overflow(spec.train.batch_size, m.world_size, &global) ||
        __builtin_mul_overflow(m.next_batch, global, &position))
      finding("the data cursor overflows but passed metadata_problems");
  }
  return 0;
}
