// Training-state checkpoints (see checkpoint_state.h).
#include "checkpoint/checkpoint_state.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>

#include "checkpoint/checksum.h"
#include "core/error.h"
#include "graph/summary.h"

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
  if (!meta.loss_scale.empty()) w.set_metadata("loss_scale", nlohmann::json(meta.loss_scale).dump());
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

CheckpointMeta read_checkpoint_meta(const SafetensorsFile& file) {
  return parse_checkpoint_meta(file.metadata(), file.source());
}

ModelSpec validated_checkpoint_spec(const std::string& config_yaml, const std::string& path,
                                    const std::vector<std::string>& overrides) {
  ModelSpec spec = parse_model_text(config_yaml, path + " (config)", overrides);
  std::unique_ptr<Graph> graph = Graph::build(spec);
  // The table `cnn-train validate` prints: computing it runs the same shape and size checks.
  (void)format_model_table(*graph, spec, spec.train.batch_size);
  return spec;
}

namespace {

std::string join(const std::vector<std::string>& v, const char* sep = "; ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

}  // namespace

LoadedCheckpoint read_checkpoint(const std::string& path_or_run_dir) {
  std::string path = resolve_checkpoint_path(path_or_run_dir);
  LoadedCheckpoint c{path, SafetensorsFile::open(path), {}, true};
  if (!has_checkpoint_format(c.file.metadata()))
    CNN_THROW("'{}' is not a cnn-train checkpoint (metadata 'format' is missing or not '{}')", path,
              kCheckpointFormat);
  ChecksumReport rep = verify_checksums(c.file);
  if (!rep.ok()) CNN_THROW("checkpoint '{}' is corrupt: tensor '{}': {}", path, rep.first_mismatch, rep.message);
  if (!rep.unchecked.empty())
    CNN_THROW("checkpoint '{}' carries cnn-train metadata but no checksum for {} of its {} tensors ({}): its bytes "
              "cannot be verified, so it is refused",
              path, rep.unchecked.size(), c.file.tensors().size(), join_some(rep.unchecked, 3));
  c.meta = read_checkpoint_meta(c.file);
  ModelSpec spec = validated_checkpoint_spec(c.meta.config_yaml, path);
  std::vector<std::string> problems = metadata_problems(c.meta, spec);
  if (!problems.empty()) CNN_THROW("checkpoint '{}' has impossible metadata: {}", path, join(problems));
  return c;
}

LoadedCheckpoint read_weights_checkpoint(const std::string& path_or_run_dir) {
  std::string path = resolve_checkpoint_path(path_or_run_dir);
  SafetensorsFile f = SafetensorsFile::open(path);
  if (has_checkpoint_format(f.metadata())) return read_checkpoint(path);
  ChecksumReport rep = verify_checksums(f);
  if (!rep.ok()) CNN_THROW("'{}' is corrupt: tensor '{}': {}", path, rep.first_mismatch, rep.message);
  if (rep.matched == 0)
    spdlog::warn("'{}' is not a cnn-train checkpoint and has no checksums: its bytes cannot be verified", path);
  else if (!rep.unchecked.empty())
    spdlog::warn("'{}' is not a cnn-train checkpoint and has no checksum for {} of its tensors ({})", path,
                 rep.unchecked.size(), join_some(rep.unchecked, 3));
  return LoadedCheckpoint{path, std::move(f), {}, false};
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
  if (!missing.empty()) problems.push_back("missing: " + join_some(missing, kNamesShown));
  if (!unexpected.empty()) problems.push_back("unexpected: " + join_some(unexpected, kNamesShown));
  if (!mismatched.empty()) problems.push_back("mismatched: " + join_some(mismatched, kNamesShown));
  if (strict && !problems.empty())
    CNN_THROW("checkpoint '{}' does not match the model: {}", file.source(), join(problems, ", "));
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
