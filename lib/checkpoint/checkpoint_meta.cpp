// Checkpoint metadata from strings, range-checked (see checkpoint_meta.h).
#include "checkpoint/checkpoint_meta.h"

#include <charconv>
#include <cmath>

#include "checkpoint/bounded_json.h"
#include "core/error.h"

namespace cnn {

using nlohmann::json;

namespace {

std::string clip(const std::string& s, size_t max_chars = 60) { return clip_text(s, max_chars); }

const std::string& required(const std::map<std::string, std::string>& m, const char* key, const std::string& source) {
  auto it = m.find(key);
  if (it == m.end()) CNN_THROW("checkpoint '{}': metadata has no '{}'", source, key);
  return it->second;
}

// A decimal integer and nothing else (no spaces, no '+', no hex), within [lo, hi].
int64_t meta_int(const std::map<std::string, std::string>& m, const char* key, const std::string& source, int64_t lo,
                 int64_t hi) {
  const std::string& text = required(m, key, source);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty())
    CNN_THROW("checkpoint '{}': metadata '{}' is '{}', expected an integer", source, key, clip(text));
  if (v < lo || v > hi)
    CNN_THROW("checkpoint '{}': metadata '{}' is {}, outside [{}, {}]", source, key, v, lo, hi);
  return v;
}

// A finite decimal number within [lo, hi].
double meta_double(const std::map<std::string, std::string>& m, const char* key, const std::string& source, double lo,
                   double hi) {
  const std::string& text = required(m, key, source);
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(v))
    CNN_THROW("checkpoint '{}': metadata '{}' is '{}', expected a finite number", source, key, clip(text));
  if (v < lo || v > hi) CNN_THROW("checkpoint '{}': metadata '{}' is {}, outside [{}, {}]", source, key, v, lo, hi);
  return v;
}

// `json_values` counts the values of every JSON metadata value parsed so far: they are kept
// together, so kMaxMetadataJsonValues caps them together.
json meta_json(const std::map<std::string, std::string>& m, const char* key, const std::string& source,
               size_t& json_values) {
  json j = parse_bounded_json(required(m, key, source), {kMaxMetadataJsonDepth, kMaxMetadataJsonValues},
                              fmt::format("checkpoint '{}': metadata '{}'", source, key), &json_values);
  if (!j.is_object()) CNN_THROW("checkpoint '{}': metadata '{}' is a JSON {}, expected an object", source, key, j.type_name());
  return j;
}

bool finite_in(const json& v, double lo, double hi) {
  return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= lo && v.get<double>() <= hi;
}

void check_epoch_progress(const json& p, const std::string& source) {
  auto bad = [&](const char* k, const char* expected) {
    CNN_THROW("checkpoint '{}': metadata 'epoch_progress.{}' is {}, expected {}", source, k, clip(p[k].dump()),
              expected);
  };
  for (const char* k : {"loss_sum", "correct"})
    if (p.contains(k) && !finite_in(p[k], 0, 1e300)) bad(k, "a finite number >= 0");
  if (p.contains("seen") && !(p["seen"].is_number_integer() && p["seen"].get<int64_t>() >= 0 &&
                              p["seen"].get<int64_t>() <= kMaxMetaCount))
    bad("seen", "an integer in [0, 2^48]");
}

void check_normalization(const json& n, const std::string& source) {
  if (n.empty()) return;  // written before the normalisation was recorded
  for (const char* k : {"mean", "std"}) {
    if (!n.contains(k) || !n[k].is_array() || n[k].empty())
      CNN_THROW("checkpoint '{}': metadata 'normalization' has no '{}' list", source, k);
    for (const json& v : n[k])
      if (!finite_in(v, k[0] == 's' ? 1e-12 : -1e6, 1e6))
        CNN_THROW("checkpoint '{}': metadata 'normalization.{}' holds {}, expected {}", source, k, clip(v.dump()),
                  k[0] == 's' ? "finite numbers > 0" : "finite numbers");
  }
  if (n["mean"].size() != n["std"].size())
    CNN_THROW("checkpoint '{}': metadata 'normalization' has {} means but {} stds", source, n["mean"].size(),
              n["std"].size());
}

}  // namespace

bool has_checkpoint_format(const std::map<std::string, std::string>& m) {
  auto it = m.find("format");
  return it != m.end() && it->second == kCheckpointFormat;
}

CheckpointMeta parse_checkpoint_meta(const std::map<std::string, std::string>& m, const std::string& source) {
  if (!has_checkpoint_format(m))
    CNN_THROW("'{}' is not a cnn-train checkpoint (metadata 'format' is missing or not '{}')", source,
              kCheckpointFormat);
  const std::string& version = required(m, "format_version", source);
  if (version != std::to_string(kCheckpointVersion))
    CNN_THROW("checkpoint '{}' has format version {}, this program reads version {}", source, clip(version),
              kCheckpointVersion);
  CheckpointMeta meta;
  meta.config_yaml = required(m, "config", source);
  meta.epoch = meta_int(m, "epoch", source, 0, kMaxMetaCount);
  meta.next_batch = meta_int(m, "next_batch", source, 0, kMaxMetaCount);
  meta.step = meta_int(m, "step", source, 0, kMaxMetaCount);
  meta.optimizer_steps = meta_int(m, "optimizer_steps", source, 0, kMaxMetaCount);
  meta.world_size = meta_int(m, "world_size", source, 1, kMaxWorldSize);
  meta.dataset_fingerprint = required(m, "dataset_fingerprint", source);

  size_t json_values = 0;
  // Maps of strings: the schedule's state, and an fp16 run's loss scale.
  auto string_map = [&](const char* key, std::map<std::string, std::string>& out) {
    const json value = meta_json(m, key, source, json_values);
    if (!value.is_object()) CNN_THROW("checkpoint '{}': metadata '{}' is {}, expected an object", source, key, clip(value.dump()));
    for (const auto& [k, v] : value.items()) {
      if (!v.is_string())
        CNN_THROW("checkpoint '{}': metadata '{}.{}' is {}, expected a string", source, key, clip(k), clip(v.dump()));
      out[k] = v.get<std::string>();
    }
  };
  string_map("schedule", meta.schedule);
  if (m.count("loss_scale")) string_map("loss_scale", meta.loss_scale);
  const json rng = meta_json(m, "rng", source, json_values);
  if (!rng.contains("seed") || !rng["seed"].is_number_unsigned())
    CNN_THROW("checkpoint '{}': metadata 'rng' has no 'seed' that is an integer in [0, 2^64)", source);
  meta.seed = rng["seed"].get<uint64_t>();
  meta.metrics = meta_json(m, "metrics", source, json_values);
  if (m.count("epoch_progress")) meta.epoch_progress = meta_json(m, "epoch_progress", source, json_values);
  check_epoch_progress(meta.epoch_progress, source);
  if (m.count("normalization")) meta.normalization = meta_json(m, "normalization", source, json_values);
  check_normalization(meta.normalization, source);
  if (m.count("elapsed_s")) meta.elapsed_s = meta_double(m, "elapsed_s", source, 0, kMaxElapsedSeconds);
  if (m.count("best_metric")) {
    meta.has_best = true;
    meta.best_metric = meta_double(m, "best_metric", source, -1e300, 1e300);
  }
  return meta;
}

std::vector<std::string> metadata_problems(const CheckpointMeta& meta, const ModelSpec& spec) {
  std::vector<std::string> out;
  const int64_t epochs = spec.train.epochs, batch = spec.train.batch_size;
  if (meta.epoch > epochs || (meta.epoch == epochs && meta.next_batch > 0))
    out.push_back(
        fmt::format("epoch {} (next batch {}) is beyond train.epochs = {}", meta.epoch, meta.next_batch, epochs));
  // Every epoch, and a started one, took at least one step (a train split is never empty).
  if (meta.step < meta.epoch + (meta.next_batch > 0 ? 1 : 0))
    out.push_back(fmt::format("step {} is fewer than the epochs trained (epoch {}, next batch {}): every epoch "
                              "takes at least one step",
                              meta.step, meta.epoch, meta.next_batch));
  if (meta.optimizer_steps > meta.step)
    out.push_back(fmt::format("optimizer_steps {} exceeds step {}", meta.optimizer_steps, meta.step));
  int64_t global = 0, position = 0;
  if (batch < 1 || __builtin_mul_overflow(batch, meta.world_size, &global) ||
      __builtin_mul_overflow(meta.next_batch, global, &position) || position > kMaxMetaCount) {
    out.push_back(fmt::format("next batch {} of {} rank(s) x train.batch_size {} is beyond 2^48 samples an epoch",
                              meta.next_batch, meta.world_size, batch));
  } else {
    const json& p = meta.epoch_progress;
    const int64_t seen = p.is_object() ? p.value("seen", int64_t(0)) : 0;
    if (seen > position)
      out.push_back(fmt::format("epoch_progress.seen {} exceeds the {} samples of the {} batch(es) of epoch {} trained",
                                seen, position, meta.next_batch, meta.epoch + 1));
    if (p.is_object() && p.value("correct", 0.0) > double(seen))
      out.push_back(fmt::format("epoch_progress.correct {} exceeds epoch_progress.seen {}", p.value("correct", 0.0), seen));
  }
  if (meta.seed != spec.train.seed)
    out.push_back(fmt::format("rng seed {} differs from the config's train.seed {}", meta.seed, spec.train.seed));
  const json& norm = meta.normalization;
  if (norm.is_object() && norm.contains("mean") && int64_t(norm.at("mean").size()) != spec.input.channels)
    out.push_back(fmt::format("normalization has {} channel(s), the config's input has {}", norm.at("mean").size(),
                              spec.input.channels));
  return out;
}

}  // namespace cnn
