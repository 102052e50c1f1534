// Training-state checkpoints (see checkpoint_state.h).
#include "train/checkpoint_state.h"

#include <filesystem>

#include "checkpoint/checksum.h"
#include "core/error.h"

namespace cnn {

namespace fs = std::filesystem;

void write_checkpoint(const std::string& path, Executor& ex, Optimizer* opt, const CheckpointMeta& meta) {
  SafetensorsWriter w;
  const Graph& g = ex.graph();
  for (size_t i = 0; i < g.params().size(); ++i) {
    const ParamEntry& e = g.params()[i];
    std::vector<float> host = ex.param(int(i)).to_vector();
    w.add_f32(e.name, e.shape.dims(), host.data());
  }
  if (opt) {
    for (auto& [name, t] : opt->state_tensors()) {
      std::vector<float> host = t.to_vector();
      w.add_f32(name, t.shape().dims(), host.data());
    }
  }
  w.set_metadata("format", kCheckpointFormat);
  w.set_metadata("format_version", std::to_string(kCheckpointVersion));
  w.set_metadata("config", meta.config_yaml);
  w.set_metadata("epoch", std::to_string(meta.epoch));
  w.set_metadata("next_batch", std::to_string(meta.next_batch));
  w.set_metadata("step", std::to_string(meta.step));
  w.set_metadata("optimizer_steps", std::to_string(opt ? opt->step_count() : meta.optimizer_steps));
  w.set_metadata("schedule", nlohmann::json(meta.schedule).dump());
  w.set_metadata("rng", nlohmann::json{{"seed", meta.seed},
                                       {"generator", "philox4x32-10"},
                                       {"streams", "shuffle(seed, epoch), augment(seed, epoch, position), "
                                                   "dropout(seed ^ layer, step)"}}
                            .dump());
  w.set_metadata("dataset_fingerprint", meta.dataset_fingerprint);
  w.set_metadata("world_size", std::to_string(meta.world_size));
  w.set_metadata("metrics", meta.metrics.dump());
  w.set_metadata("epoch_progress", meta.epoch_progress.dump());
  w.set_metadata("normalization", meta.normalization.dump());
  w.set_metadata("elapsed_s", fmt::format("{:.6f}", meta.elapsed_s));
  if (meta.has_best) w.set_metadata("best_metric", fmt::format("{:.17g}", meta.best_metric));
  add_checksums(w);
  fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty() && !fs::is_directory(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec || !fs::is_directory(dir))
      CNN_THROW("cannot write checkpoint '{}': '{}' is not a directory and cannot be made one{}", path, dir.string(),
                ec ? ": " + ec.message() : "");
  }
  w.write_atomic(path);
}

std::string resolve_checkpoint_path(const std::string& p) {
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    fs::path last = fs::path(p) / "checkpoints" / "last.safetensors";
    if (!fs::exists(last, ec)) CNN_THROW("'{}' is a directory without checkpoints/last.safetensors", p);
    return last.string();
  }
  if (!fs::exists(p, ec)) CNN_THROW("checkpoint '{}' does not exist", p);
  return p;
}

static int64_t meta_int(const std::map<std::string, std::string>& m, const std::string& key, const std::string& file) {
  auto it = m.find(key);
  if (it == m.end()) CNN_THROW("checkpoint '{}': metadata has no '{}'", file, key);
  try {
    size_t used = 0;
    long long v = std::stoll(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    CNN_THROW("checkpoint '{}': metadata '{}' is '{}', expected an integer", file, key, it->second);
  }
}

static double meta_double(const std::map<std::string, std::string>& m, const std::string& key,
                          const std::string& file) {
  const std::string& text = m.at(key);
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used != text.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    CNN_THROW("checkpoint '{}': metadata '{}' is '{}', expected a number", file, key, text);
  }
}

CheckpointMeta read_checkpoint_meta(const SafetensorsFile& file) {
  const std::string& path = file.source();
  const auto& m = file.metadata();
  auto fmt_it = m.find("format");
  if (fmt_it == m.end() || fmt_it->second != kCheckpointFormat)
    CNN_THROW("'{}' is not a cnn-train checkpoint (metadata 'format' is missing or not '{}')", path, kCheckpointFormat);
  int64_t version = meta_int(m, "format_version", path);
  if (version != kCheckpointVersion)
    CNN_THROW("checkpoint '{}' has format version {}, this program reads version {}", path, version, kCheckpointVersion);
  CheckpointMeta meta;
  auto get = [&](const char* k) {
    auto it = m.find(k);
    if (it == m.end()) CNN_THROW("checkpoint '{}': metadata has no '{}'", path, k);
    return it->second;
  };
  meta.config_yaml = get("config");
  meta.epoch = meta_int(m, "epoch", path);
  meta.next_batch = meta_int(m, "next_batch", path);
  meta.step = meta_int(m, "step", path);
  meta.optimizer_steps = meta_int(m, "optimizer_steps", path);
  meta.world_size = meta_int(m, "world_size", path);
  if (meta.epoch < 0 || meta.next_batch < 0 || meta.step < 0 || meta.optimizer_steps < 0 || meta.world_size < 1)
    CNN_THROW(
        "checkpoint '{}': metadata position out of range (epoch {}, next_batch {}, step {}, optimizer_steps {}, "
        "world_size {})",
        path, meta.epoch, meta.next_batch, meta.step, meta.optimizer_steps, meta.world_size);
  meta.dataset_fingerprint = get("dataset_fingerprint");
  try {
    meta.schedule = nlohmann::json::parse(get("schedule")).get<std::map<std::string, std::string>>();
    meta.seed = nlohmann::json::parse(get("rng")).at("seed").get<uint64_t>();
    meta.metrics = nlohmann::json::parse(get("metrics"));
    if (m.count("epoch_progress")) meta.epoch_progress = nlohmann::json::parse(m.at("epoch_progress"));
    if (m.count("normalization")) meta.normalization = nlohmann::json::parse(m.at("normalization"));
    if (m.count("elapsed_s")) meta.elapsed_s = std::stod(m.at("elapsed_s"));
    // Checked here so a malformed value is reported as such rather than when the resumed epoch ends.
    if (!meta.epoch_progress.is_object()) throw std::invalid_argument("'epoch_progress' is not an object");
    for (const char* k : {"loss_sum", "correct", "seen"})
      if (meta.epoch_progress.contains(k) && !meta.epoch_progress[k].is_number())
        throw std::invalid_argument(fmt::format("'epoch_progress.{}' is not a number", k));
  } catch (const std::exception& e) {
    CNN_THROW("checkpoint '{}': malformed metadata: {}", path, e.what());
  }
  if (m.count("best_metric")) {
    meta.has_best = true;
    meta.best_metric = meta_double(m, "best_metric", path);
  }
  return meta;
}

LoadedCheckpoint read_checkpoint(const std::string& path_or_run_dir) {
  std::string path = resolve_checkpoint_path(path_or_run_dir);
  LoadedCheckpoint c{path, SafetensorsFile::open(path), {}};
  ChecksumReport rep = verify_checksums(c.file);
  if (!rep.ok()) CNN_THROW("checkpoint '{}' is corrupt: tensor '{}': {}", path, rep.first_mismatch, rep.message);
  c.meta = read_checkpoint_meta(c.file);
  return c;
}

std::vector<std::string> load_weights(Executor& ex, const SafetensorsFile& file, bool strict) {
  const Graph& g = ex.graph();
  std::vector<std::string> missing, mismatched, unexpected;
  std::map<std::string, int> ours;
  for (size_t i = 0; i < g.params().size(); ++i) ours[g.params()[i].name] = int(i);
  for (const std::string& name : file.names()) {
    if (name.rfind("optim.", 0) == 0) continue;
    if (!ours.count(name)) unexpected.push_back(name);
  }
  std::vector<std::pair<int, std::vector<float>>> loads;
  for (size_t i = 0; i < g.params().size(); ++i) {
    const ParamEntry& e = g.params()[i];
    if (!file.contains(e.name)) {
      missing.push_back(e.name);
      continue;
    }
    const TensorInfo& info = file.info(e.name);
    if (info.shape != e.shape.dims()) {
      mismatched.push_back(fmt::format("{} (checkpoint {}, model {})", e.name, Shape(info.shape).to_string(),
                                       e.shape.to_string()));
      continue;
    }
    loads.emplace_back(int(i), file.read_f32(e.name));
  }
  std::vector<std::string> problems;
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  if (!missing.empty()) problems.push_back("missing: " + list(missing));
  if (!unexpected.empty()) problems.push_back("unexpected: " + list(unexpected));
  if (!mismatched.empty()) problems.push_back("mismatched: " + list(mismatched));
  if (strict && !problems.empty())
    CNN_THROW("checkpoint '{}' does not match the model: {}", file.source(), list(problems));
  for (auto& [i, values] : loads) ex.param(i).copy_from(Tensor::from_vector(g.params()[size_t(i)].shape, values));
  return problems;
}

std::map<std::string, Tensor> read_optimizer_tensors(const SafetensorsFile& file) {
  std::map<std::string, Tensor> out;
  for (const std::string& name : file.names()) {
    if (name.rfind("optim.", 0) != 0) continue;
    out[name] = Tensor::from_vector(Shape(file.info(name).shape), file.read_f32(name));
  }
  return out;
}

}  // namespace cnn
