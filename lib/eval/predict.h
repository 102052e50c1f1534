// Inference with a trained checkpoint (cnn-eval): the run's resolved config rebuilt, weights
// loaded strictly, the split evaluated, and images (files, video frames) turned into class
// probabilities, per face or whole, exactly as evaluation sees its samples (resize to the data
// input, centre crop or ten-crop average, softmax).
// The checkpoint is self-contained: classes, input shape and normalisation come from it, so only
// evaluating a split reads data. Trap: checkpoints written before the normalisation was recorded
// need the train split again for `normalize: auto` (needs_training_data).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model_spec.h"
#include "model/model_stack.h"
#include "data/annotate.h"
#include "data/dataset.h"
#include "data/face_detect.h"
#include "data/image_io.h"
#include "data/normalize.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "eval/metrics.h"

namespace cnn {

// A run directory means its checkpoints/best.safetensors when present, else checkpoints/last;
// a file is itself. `which` is "best", "last" or "file". Error when nothing is there.
std::string pick_eval_checkpoint(const std::string& run_dir_or_ckpt, std::string* which = nullptr);

struct TrainedModel {
  std::string checkpoint;                // the file loaded
  std::string which;                     // best | last | file
  ModelSpec spec;                        // the checkpoint's resolved config, with the overrides applied
  bool ten_crop = false;                 // eval.ten_crop
  int64_t batch = 1;                     // images per forward pass: eval.batch_size rows / crops, like the trainer
  std::vector<std::string> class_names;  // the graph's; see use_data_class_names
  std::optional<Normalization> norm;     // the one the run trained with, when the checkpoint records it
  Device device = Device::cpu;
  std::unique_ptr<ModelStack> stack;  // graph, device, and an evaluation-only plan for batch * crops rows
  Graph& graph() const { return stack->graph(); }
  Executor& ex() const { return stack->executor(); }
};

// Reads and verifies the checkpoint (pick_eval_checkpoint, read_checkpoint), rebuilds its model
// with `overrides` ("key=value", like --set: e.g. eval.ten_crop=true) applied to the config,
// refuses ten-crop where it cannot help (check_ten_crop), resolves `device` (auto | cpu | cuda;
// auto takes the GPU when every layer runs there) and loads the weights strictly.
TrainedModel load_trained_model(const std::string& run_dir_or_ckpt, const std::string& device,
                                const std::vector<std::string>& overrides = {});

// Ten-crop averages crops smaller than the input; with no crop, or one as large as the input, all
// ten are the whole image (five flipped) and only blur the prediction. ConfigError (key
// eval.ten_crop, at `where`) then, saying why; nothing when spec.eval.ten_crop is off.
void check_ten_crop(const ModelSpec& spec, const std::string& where);
// "ten-crop: the mean over 10 crops of 40x40 from 48x48 (corners, centre, each flipped)",
// "centre crop 40x40 of 48x48" or "whole image 48x48": what the report says evaluation saw.
std::string describe_eval_crops(const ModelSpec& spec, bool ten_crop);

// A config without `classes` names them class0.. in the graph; when the data names its classes
// (image-folder: the folder names) and their count fits, reports use the data's names instead.
void use_data_class_names(TrainedModel& m, const DataSplits& data);

// The normalisation the training run used: with `normalize: auto` the statistics of data->train
// (Error when data is null or its train split is empty), else the config's mean and std.
Normalization training_normalization(const ModelSpec& spec, const DataSplits* data);
// True only for a checkpoint that does not record its normalisation and has `normalize: auto`.
bool needs_training_data(const TrainedModel& m);
// What evaluation and prediction normalise with: the checkpoint's normalisation; for older
// checkpoints without one, training_normalization(m.spec, data). `source` (optional) says which.
Normalization eval_normalization(const TrainedModel& m, const DataSplits* data, std::string* source = nullptr);
// The --json report: EvalReport::to_json plus "checkpoint", "ten_crop" (bool) and "crops"
// (describe_eval_crops).
std::string eval_report_json(const EvalReport& report, const TrainedModel& m);

// Evaluates one split ("train", "val" or "test") of `data` in dataset order, m.batch images at a
// time, with the loss's label smoothing: the numbers the trainer's evaluation reports.
EvalReport evaluate_split(TrainedModel& m, const DataSplits& data, const Normalization& norm, const std::string& split);

struct ClassProbability {
  std::string name;
  double probability = 0;
};

// One answer: a detected face, or the whole image when no face was searched for (or none found).
struct RegionPrediction {
  bool face = false;                     // box is a detected face
  FaceBox box;                           // the face, or the whole image (0, 0, width, height)
  std::vector<ClassProbability> ranked;  // every class, most probable first (ties: class order)
  std::string label() const;             // "happy 87.3%": the most probable class
};

struct ImagePrediction {
  std::string path;
  bool face_searched = false;             // --detect-faces
  int64_t width = 0, height = 0;          // the image's own size
  int64_t faces_found = 0;
  std::vector<RegionPrediction> regions;  // every face found, left to right; else the whole image
  // "whole image", "no face found: whole image" or "face 2 of 3: 120x120 at (40, 32)" for region i.
  std::string source(size_t i) const;
  // Per region: "<path> (<source>)", then one "  name  12.34%" line a class.
  std::string to_text() const;
};

// Classes sorted by probability, descending; equal probabilities keep class order.
std::vector<ClassProbability> rank_classes(const float* probs,  // (K)
                                           const std::vector<std::string>& names);

class Predictor {
 public:
  // ex must be planned for at least (ten_crop ? 10 : 1) rows; spec and ex must outlive the Predictor.
  // class_names: empty means the graph's.
  Predictor(Executor& ex, const ModelSpec& spec, const Normalization& norm, bool ten_crop,
            std::vector<std::string> class_names = {});

  // Softmax probabilities (n, K) of n images at the data input size, through the centre crop (or
  // the mean over the ten crops), in chunks the executor can take.
  std::vector<float> probabilities(const uint8_t* images,  // (n, C, H, W)
                                   int64_t n);
  // The answers for one image of any size, gray or RGB (converted to the data's colour mode): with
  // `faces`, one per face found (a square crop around it with `margin`, a fraction of the face's
  // side added on each side), all in one forward pass when they fit the executor's batch; without,
  // or when no face is found and whole_if_none, the whole image.
  std::vector<RegionPrediction> predict_image(const Image& img, const FaceDetector* faces, double margin,
                                              bool whole_if_none);
  // predict_image for every file (read with the data's colour mode; a file without a face is
  // classified whole), all files' crops batched together. Error naming a file that can't be read.
  std::vector<ImagePrediction> predict_files(const std::vector<std::string>& paths, const FaceDetector* faces,
                                             double margin = 0.1);

 private:
  // Appends img's regions (no probabilities yet) and their crops at the data input size.
  void add_regions(const Image& img, const FaceDetector* faces, double margin, bool whole_if_none,
                   std::vector<RegionPrediction>& regions, std::vector<uint8_t>& crops) const;
  // Fills `ranked` of the regions from their crops, in one batched probabilities() call.
  void rank_regions(const std::vector<uint8_t>& crops, std::vector<RegionPrediction*>& regions);

  Executor& m_ex;
  const ModelSpec& m_spec;
  Normalization m_norm;
  bool m_ten_crop;
  bool m_gray;
  std::vector<std::string> m_names;
};

// {"face": {x, y, width, height} | null, "box": {..}, "top": name, "probabilities": [{"name",
// "probability"}, ...] (ranked)}: one answer, as the image JSON and the video JSONL hold it.
nlohmann::json region_json(const RegionPrediction& r);
// {"checkpoint": .., "ten_crop": bool, "crops": describe_eval_crops, "predictions": [one per region:
// {"image", "source", "faces_found", then region_json's keys}]}
std::string predictions_to_json(const std::vector<ImagePrediction>& preds, const TrainedModel& m);
// A box and label() a region.
std::vector<BoxLabel> region_labels(const std::vector<RegionPrediction>& regions);
// The image at `path` in colour with every region's box and label() drawn (annotated_image),
// written to `out` (format by extension). Error naming either file when it can't.
void write_annotated_image(const ImagePrediction& pred, const std::string& out);

}  // namespace cnn
