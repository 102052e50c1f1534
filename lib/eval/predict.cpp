// Inference with a trained checkpoint (see predict.h).
#include "eval/predict.h"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "core/error.h"
#include "data/annotate.h"
#include "data/augment.h"
#include "data/image_io.h"
#include "data/loader.h"
#include "checkpoint/checkpoint_state.h"
#include "eval/evaluate.h"

namespace cnn {

namespace fs = std::filesystem;

namespace {

const Dataset& split_of(const DataSplits& data, const std::string& split) {
  if (split == "train") return data.train;
  if (split == "val") return data.val;
  if (split == "test") return data.test;
  throw ConfigError({"--split"}, "split", fmt::format("expected train, val or test, found '{}'", split));
}

}  // namespace

std::string pick_eval_checkpoint(const std::string& p, std::string* which) {
  std::error_code ec;
  std::string w = "file", path = p;
  if (fs::is_directory(p, ec)) {
    fs::path best = fs::path(p) / "checkpoints" / "best.safetensors";
    fs::path last = fs::path(p) / "checkpoints" / "last.safetensors";
    if (fs::exists(best, ec))
      w = "best", path = best.string();
    else if (fs::exists(last, ec))
      w = "last", path = last.string();
    else
      CNN_THROW("'{}' is a directory without checkpoints/best.safetensors or checkpoints/last.safetensors", p);
  } else if (!fs::exists(p, ec)) {
    CNN_THROW("checkpoint '{}' does not exist", p);
  }
  if (which) *which = w;
  return path;
}

TrainedModel load_trained_model(const std::string& run_dir_or_ckpt, const std::string& device,
                                const std::vector<std::string>& overrides) {
  TrainedModel m;
  m.checkpoint = pick_eval_checkpoint(run_dir_or_ckpt, &m.which);
  LoadedCheckpoint c = read_checkpoint(m.checkpoint);
  m.spec = validated_checkpoint_spec(c.meta.config_yaml, c.path, overrides);
  check_ten_crop(m.spec, c.path + " (config, with the command line's overrides)");
  m.ten_crop = m.spec.eval.ten_crop;
  if (!c.meta.normalization.empty()) {
    Normalization n;
    n.mean = c.meta.normalization.at("mean").get<std::vector<float>>();
    n.std = c.meta.normalization.at("std").get<std::vector<float>>();
    m.norm = n;
  }
  const int crops = m.ten_crop ? 10 : 1;
  m.batch = std::max<int64_t>(1, m.spec.eval.batch_size / crops);
  m.stack = std::make_unique<ModelStack>(m.spec);
  // The trainer's device policy: auto takes the GPU only when every layer has a GPU implementation.
  m.stack->build_inference(m.spec, device, m.batch * crops);
  m.device = m.stack->device().device();
  load_weights(m.ex(), c.file, true);
  m.class_names = m.graph().class_names();
  return m;
}

void check_ten_crop(const ModelSpec& spec, const std::string& where) {
  if (!spec.eval.ten_crop) return;
  const InputSpec& in = spec.input;
  const int64_t crop = spec.data.augment.crop_size;
  if (crop > 0 && (crop < in.height || crop < in.width)) return;
  throw ConfigError(
      {where}, "eval.ten_crop",
      fmt::format("ten-crop (--ten-crop or eval.ten_crop: true) needs a crop smaller than the {}x{} input, but {}: "
                  "all ten crops would be the whole image (five of them flipped), which lowers accuracy instead of "
                  "raising it; evaluate without it, or train with a smaller data.augment.random_crop.size",
                  in.height, in.width,
                  crop > 0 ? fmt::format("data.augment.random_crop.size is {}", crop)
                           : std::string("the model has no data.augment.random_crop")));
}

std::string describe_eval_crops(const ModelSpec& spec, bool ten_crop) {
  const InputSpec& in = spec.input;
  const int64_t crop = spec.data.augment.crop_size;
  if (ten_crop)
    return fmt::format("ten-crop: the mean over 10 crops of {}x{} from {}x{} (corners, centre, each flipped)", crop,
                       crop, in.height, in.width);
  if (crop > 0 && (crop < in.height || crop < in.width))
    return fmt::format("centre crop {}x{} of {}x{}", crop, crop, in.height, in.width);
  return fmt::format("whole image {}x{}", in.height, in.width);
}

void use_data_class_names(TrainedModel& m, const DataSplits& data) {
  if (m.spec.classes.empty() && int64_t(data.class_names.size()) == m.graph().num_classes())
    m.class_names = data.class_names;
}

Normalization training_normalization(const ModelSpec& spec, const DataSplits* data) {
  if (!spec.data.normalize.automatic) {
    Dataset shape_only;
    shape_only.channels = spec.input.channels;
    return resolve_normalization(spec.data.normalize, shape_only);
  }
  if (!data || data->train.size() == 0)
    CNN_THROW("data.normalize is auto: the training statistics are recomputed from the train split of '{}', and {}",
              spec.data.path, data ? "it is empty" : "no data was loaded");
  return resolve_normalization(spec.data.normalize, data->train);
}

bool needs_training_data(const TrainedModel& m) { return !m.norm && m.spec.data.normalize.automatic; }

Normalization eval_normalization(const TrainedModel& m, const DataSplits* data, std::string* source) {
  if (m.norm) {
    if (source) *source = "from the checkpoint";
    return *m.norm;
  }
  if (source)
    *source = m.spec.data.normalize.automatic
                  ? "auto, recomputed from the train split: the checkpoint predates recorded normalisations"
                  : "from the config";
  return training_normalization(m.spec, data);
}

std::string eval_report_json(const EvalReport& report, const TrainedModel& m) {
  nlohmann::json j = nlohmann::json::parse(report.to_json());
  j["checkpoint"] = m.checkpoint;
  j["ten_crop"] = m.ten_crop;
  j["crops"] = describe_eval_crops(m.spec, m.ten_crop);
  return j.dump(2);
}

EvalReport evaluate_split(TrainedModel& m, const DataSplits& data, const Normalization& norm,
                          const std::string& split) {
  const Dataset& d = split_of(data, split);
  if (d.size() == 0) CNN_THROW("the {} split of '{}' is empty", split, m.spec.data.path);
  LoaderOptions o;
  o.mode = LoaderMode::eval;
  o.batch_size = m.batch;
  o.ten_crop = m.ten_crop;
  o.workers = m.spec.data.workers;
  o.prefetch = m.spec.data.prefetch;
  Loader loader(d, o, norm, m.spec.data.augment);
  if (loader.output_shape() != m.graph().input_shape())
    CNN_THROW("the loader makes {} images but the network expects {}", loader.output_shape().to_string(),
              m.graph().input_shape().to_string());
  return evaluate(m.ex(), loader, m.class_names, split, m.spec.loss.label_smoothing);
}

std::vector<ClassProbability> rank_classes(const float* probs, const std::vector<std::string>& names) {
  std::vector<size_t> order(names.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probs[a] > probs[b]; });
  std::vector<ClassProbability> out;
  for (size_t k : order) out.push_back({names[k], double(probs[k])});
  return out;
}

std::string RegionPrediction::label() const {
  if (ranked.empty()) return "";
  return fmt::format("{} {:.1f}%", ranked.front().name, 100 * ranked.front().probability);
}

std::string ImagePrediction::source(size_t i) const {
  const RegionPrediction& r = regions.at(i);
  if (r.face) return fmt::format("face {} of {}: {}", i + 1, regions.size(), r.box.to_string());
  return face_searched ? "no face found: whole image" : "whole image";
}

std::string ImagePrediction::to_text() const {
  std::string out;
  for (size_t i = 0; i < regions.size(); ++i) {
    out += fmt::format("{} ({})\n", path, source(i));
    size_t w = 5;
    for (const auto& c : regions[i].ranked) w = std::max(w, c.name.size());
    for (const auto& c : regions[i].ranked) out += fmt::format("  {:<{}}  {:6.2f}%\n", c.name, w, 100 * c.probability);
  }
  return out;
}

Predictor::Predictor(Executor& ex, const ModelSpec& spec, const Normalization& norm, bool ten_crop,
                     std::vector<std::string> class_names)
    : m_ex(ex), m_spec(spec), m_norm(norm), m_ten_crop(ten_crop), m_names(std::move(class_names)) {
  if (m_names.empty()) m_names = ex.graph().class_names();
  CNN_CHECK(int64_t(m_names.size()) == ex.graph().num_classes(), "{} class names for {} classes", m_names.size(),
            ex.graph().num_classes());
  const std::string& color = spec.data.color;
  if (color != "auto" && color != "gray" && color != "rgb")
    throw ConfigError({}, "data.color", fmt::format("expected auto, gray or rgb, found '{}'", color));
  m_gray = color == "gray" || (color == "auto" && spec.input.channels == 1);
  CNN_CHECK(m_ex.max_batch() >= (ten_crop ? 10 : 1), "executor planned for {} rows, ten-crop needs 10",
            m_ex.max_batch());
}

std::vector<float> Predictor::probabilities(const uint8_t* images, int64_t n) {
  const InputSpec& in = m_spec.input;
  Augmenter aug(m_spec.data.augment, m_norm, in.channels, in.height, in.width);
  if (aug.sample_shape() != m_ex.graph().input_shape())
    CNN_THROW("the crops are {} but the network expects {}", aug.sample_shape().to_string(),
              m_ex.graph().input_shape().to_string());
  const int crops = m_ten_crop ? 10 : 1;
  const int64_t K = m_ex.graph().num_classes(), sample = in.channels * in.height * in.width;
  const int64_t numel = aug.sample_numel(), chunk = std::max<int64_t>(1, m_ex.max_batch() / crops);
  std::vector<float> out(size_t(n * K), 0.0f), rows;
  for (int64_t start = 0; start < n; start += chunk) {
    const int64_t m = std::min(chunk, n - start);
    rows.resize(size_t(m * crops * numel));
    for (int64_t i = 0; i < m; ++i) {
      float* dst = rows.data() + i * crops * numel;
      if (m_ten_crop)
        aug.ten_crop(images + (start + i) * sample, dst);
      else
        aug.center_crop(images + (start + i) * sample, dst);
    }
    device_memcpy(m_ex.input().data(), m_ex.input().device(), rows.data(), Device::cpu, rows.size() * sizeof(float));
    m_ex.forward(m * crops, false, 0, 0);
    const std::vector<float> logits = m_ex.output().to_vector();  // (m * crops, K)
    for (int64_t r = 0; r < m * crops; ++r) {
      const float* z = logits.data() + r * K;
      const double zmax = *std::max_element(z, z + K);
      double sum = 0;
      for (int64_t k = 0; k < K; ++k) sum += std::exp(double(z[k]) - zmax);
      float* p = out.data() + (start + r / crops) * K;
      for (int64_t k = 0; k < K; ++k) p[k] += float(std::exp(double(z[k]) - zmax) / sum / crops);
    }
  }
  return out;
}

void Predictor::add_regions(const Image& img, const FaceDetector* faces, double margin, bool whole_if_none,
                            std::vector<RegionPrediction>& regions, std::vector<uint8_t>& crops) const {
  const InputSpec& in = m_spec.input;
  const size_t sample = size_t(in.channels * in.height * in.width);
  Image converted;
  if (m_gray && img.channels == 3) converted = gray_image(img);
  const Image& seen = m_gray && img.channels == 3 ? converted : img;
  std::vector<FaceBox> found;
  if (faces) found = faces->faces(seen);
  std::vector<std::pair<FaceBox, FaceBox>> boxes;  // (box reported, region cropped)
  for (const FaceBox& f : found) boxes.emplace_back(f, square_face_crop(f, margin, seen.height, seen.width));
  if (found.empty() && (!faces || whole_if_none)) {
    const FaceBox whole{0, 0, seen.width, seen.height};
    boxes.emplace_back(whole, whole);
  }
  for (const auto& [box, crop] : boxes) {
    RegionPrediction r;
    r.face = !found.empty();
    r.box = box;
    regions.push_back(r);
    crops.resize(crops.size() + sample);
    resize_region(seen, crop.x, crop.y, crop.width, crop.height, in.channels, in.height, in.width,
                  crops.data() + crops.size() - sample);
  }
}

void Predictor::rank_regions(const std::vector<uint8_t>& crops, std::vector<RegionPrediction*>& regions) {
  if (regions.empty()) return;
  const std::vector<float> probs = probabilities(crops.data(), int64_t(regions.size()));
  const int64_t K = m_ex.graph().num_classes();
  for (size_t i = 0; i < regions.size(); ++i) regions[i]->ranked = rank_classes(probs.data() + int64_t(i) * K, m_names);
}

std::vector<RegionPrediction> Predictor::predict_image(const Image& img, const FaceDetector* faces, double margin,
                                                       bool whole_if_none) {
  std::vector<RegionPrediction> regions;
  std::vector<uint8_t> crops;
  add_regions(img, faces, margin, whole_if_none, regions, crops);
  std::vector<RegionPrediction*> all;
  for (RegionPrediction& r : regions) all.push_back(&r);
  rank_regions(crops, all);
  return regions;
}

std::vector<ImagePrediction> Predictor::predict_files(const std::vector<std::string>& paths, const FaceDetector* faces,
                                                      double margin) {
  std::vector<ImagePrediction> preds(paths.size());
  std::vector<uint8_t> crops;
  for (size_t i = 0; i < paths.size(); ++i) {
    std::error_code ec;
    if (!fs::is_regular_file(paths[i], ec)) CNN_THROW("image '{}' does not exist", paths[i]);
    const Image img = read_image(paths[i], m_gray);
    ImagePrediction& p = preds[i];
    p.path = paths[i];
    p.face_searched = faces != nullptr;
    p.width = img.width;
    p.height = img.height;
    add_regions(img, faces, margin, true, p.regions, crops);
    for (const RegionPrediction& r : p.regions) p.faces_found += r.face ? 1 : 0;
  }
  std::vector<RegionPrediction*> all;
  for (ImagePrediction& p : preds)
    for (RegionPrediction& r : p.regions) all.push_back(&r);
  rank_regions(crops, all);
  return preds;
}

static nlohmann::json box_json(const FaceBox& b) {
  return {{"x", b.x}, {"y", b.y}, {"width", b.width}, {"height", b.height}};
}

nlohmann::json region_json(const RegionPrediction& r) {
  nlohmann::json probs = nlohmann::json::array();
  for (const auto& c : r.ranked) probs.push_back({{"name", c.name}, {"probability", c.probability}});
  return {{"face", r.face ? box_json(r.box) : nlohmann::json(nullptr)},
          {"box", box_json(r.box)},
          {"top", r.ranked.empty() ? "" : r.ranked.front().name},
          {"probabilities", probs}};
}

std::string predictions_to_json(const std::vector<ImagePrediction>& preds, const TrainedModel& m) {
  nlohmann::json j{{"checkpoint", m.checkpoint},
                   {"ten_crop", m.ten_crop},
                   {"crops", describe_eval_crops(m.spec, m.ten_crop)},
                   {"predictions", nlohmann::json::array()}};
  for (const auto& p : preds) {
    for (size_t i = 0; i < p.regions.size(); ++i) {
      nlohmann::json entry{{"image", p.path}, {"source", p.source(i)}, {"faces_found", p.faces_found}};
      entry.update(region_json(p.regions[i]));
      j["predictions"].push_back(entry);
    }
  }
  return j.dump(2);
}

std::vector<BoxLabel> region_labels(const std::vector<RegionPrediction>& regions) {
  std::vector<BoxLabel> labels;
  for (const RegionPrediction& r : regions) labels.push_back({r.box, r.label()});
  return labels;
}

void write_annotated_image(const ImagePrediction& pred, const std::string& out) {
  const Image img = read_image(pred.path, false);
  CNN_CHECK(img.width == pred.width && img.height == pred.height, "{}: {}x{} in colour, {}x{} when classified",
            pred.path, img.width, img.height, pred.width, pred.height);
  write_image(out, annotated_image(img, region_labels(pred.regions)));
}

}  // namespace cnn
