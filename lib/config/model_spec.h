// The typed model file: what the rest of the library reads. Parsed once, by a schema that
// declares every key (model_spec.cpp for the sections, each layer file for its layer's keys), into
// these plain structs; defaults are the member initialisers below (the declarations take them from
// here) and are written into the resolved config. Every value keeps its location: a section's
// `config` (and a layer's `attrs`) is the validated Value, so a later check reports file:line:col
// with `spec.data.config["path"].fail("...")`.
// Trap: parsing needs the layer types' schemas (the layer registry holds them); lib/layers/registry.h
// has load_model_spec / parse_model_text overloads that pass the built-in ones.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/schema.h"
#include "config/value.h"

namespace cnn {

// Most layers a model may have, most classes (the final layer's width is capped the same way).
constexpr int64_t kMaxLayers = 4096;

struct InputSpec {
  int64_t channels = 1;
  int64_t height = 0;
  int64_t width = 0;
  Value config;  // the `input` section as resolved, with locations
};

struct LayerSpec {
  std::string name;
  std::string type;
  std::vector<std::string> inputs;  // empty: the previous layer (or the model input for the first)
  std::string backend = "auto";     // auto | cpu | cuda | cudnn
  std::string preferred_backend = "auto";  // train.backend: what `auto` means on a GPU where the layer supports it
  std::string own_precision = "auto";  // the layer's `precision:` key: auto | fp32 | tf32 | bf16 | fp16
  std::string precision = "fp32";   // resolved: own_precision, or train.precision when auto (core/math_mode.h)
  int index = 0;                    // position in `layers`
  Value attrs;                      // this layer's map: every key of its type, defaults filled in, with locations
  Location where;
};

struct LossSpec {
  std::string type = "softmax_cross_entropy";
  double label_smoothing = 0.0;
  std::string class_weights = "none";     // none | balanced | list
  std::vector<double> class_weight_values;  // when class_weights: [w0, w1, ...] was given
  Value config;
};

struct NormalizeSpec {
  bool automatic = true;        // "auto": mean/std computed on the training split
  std::vector<double> mean;     // per channel, in 0..1 pixel units, when not automatic
  std::vector<double> std;
};

struct AugmentSpec {
  int64_t crop_size = 0;        // random_crop.size; 0 = no random crop
  int64_t crop_padding = 0;     // random_crop.padding (zero padding before cropping)
  bool hflip = false;
  double rotate = 0.0;          // degrees: uniform in [-rotate, +rotate]
  double brightness = 0.0;      // additive jitter, fraction of full scale
  double contrast = 0.0;        // multiplicative jitter around the image mean
};

struct DataSpec {
  std::string format = "idx";   // fer2013-csv | image-folder | idx | synthetic
  std::string path;             // relative paths are relative to the current directory
  NormalizeSpec normalize;
  AugmentSpec augment;
  double val_split = 0.1;       // fraction of train carved out as val when the source has none
  uint64_t split_seed = 1234;   // fixed seed of that carve
  std::string on_bad_row = "error";  // error | skip (fer2013-csv rows, image-folder files)
  int64_t workers = 2;          // background loader threads
  int64_t prefetch = 4;         // batches prepared ahead
  bool drop_last = false;
  int64_t synthetic_size = 1024;  // images per split for format: synthetic
  std::string color = "auto";   // auto | gray | rgb: how image-folder files are read
  std::string gpu_resident = "auto";  // auto | on | off (CUDA issue)
  Value config;
};

struct OptimizerSpec {
  std::string type = "sgd";     // sgd | adam | adamw | rmsprop
  double lr = 0.01;
  double momentum = 0.9;        // sgd, rmsprop
  bool nesterov = false;        // sgd
  double weight_decay = 0.0;    // L2 for sgd/adam/rmsprop, decoupled for adamw
  double beta1 = 0.9;           // adam/adamw
  double beta2 = 0.999;
  double eps = 1e-8;            // adam/adamw/rmsprop
  double alpha = 0.99;          // rmsprop smoothing
};

struct ScheduleSpec {
  std::string type = "constant";  // constant | step | multistep | exponential | cosine | plateau
  double warmup_epochs = 0.0;     // linear warmup from warmup_start_factor*lr
  double warmup_start_factor = 0.0;
  int64_t step_size = 10;          // step: epochs between decays
  std::vector<int64_t> milestones; // multistep: epochs at which to decay
  double gamma = 0.1;              // step/multistep/exponential decay factor
  double min_lr = 0.0;             // cosine floor
  // reduce-on-plateau
  std::string monitor = "val_loss";  // val_loss | val_acc
  double factor = 0.1;
  int64_t patience = 5;
  double threshold = 1e-4;
};

struct CheckpointSpec {
  int64_t every_epochs = 1;     // epoch-NNNN.safetensors every N epochs (0 = never)
  int64_t keep_last = 3;        // keep the last K epoch-NNNN files (0 = keep all)
  std::string best_metric = "val_acc";  // val_acc | val_loss | val_macro_f1
};

struct EarlyStoppingSpec {
  std::string metric = "val_loss";  // val_loss | val_acc | val_macro_f1
  int64_t patience = 0;             // epochs without improvement before stopping; 0 = off
  double min_delta = 0.0;           // the smallest change that counts as an improvement
};

// train.autotune: how the autotuner measures (set by --autotune-cache, --workspace-mb and
// --autotune-tolerance through the config, so config.yaml records them).
struct AutotuneSpec {
  std::string cache;           // "" = $CNN_AUTOTUNE_CACHE, else the per-user default; "none" = no disk cache
  int64_t workspace_mb = 1024;  // most scratch MiB one conv algorithm may take
  double tolerance = 0.0;      // 0 = each candidate's own (FP32 1e-4, TF32 5e-3, per op); > 0 replaces all
};

// train.loss_scale: the dynamic loss scale of an fp16 run (optim/loss_scaler.h; ignored otherwise).
struct LossScaleSpec {
  double init = 65536.0;           // the first scale: a power of two in [1, 2^24]
  int64_t growth_interval = 2000;  // clean steps in a row after which the scale doubles
};

struct TrainSpec {
  int64_t epochs = 10;
  int64_t batch_size = 64;
  uint64_t seed = 42;
  bool deterministic = false;
  bool fuse_activations = true;  // batchnorm/dense apply a following activation in their kernels
  bool fold_conv_bias = true;    // tf32/bf16/fp16: a conv2d bias before a batchnorm folds into its mean (Graph)
  int64_t max_steps = 0;        // 0 = no limit
  std::string backend = "auto";  // auto | cuda | cudnn: on a GPU, layers left auto use this one where they can
  std::string precision = "fp32";  // fp32 | tf32 | bf16 | fp16 (core/math_mode.h: Precision)
  std::string tf32_layout = "auto";  // auto | nchw | nhwc: tf32 activations channels-last (DType::f32cl) or not
  LossScaleSpec loss_scale;
  AutotuneSpec autotune;
  bool cuda_graph = true;       // capture the GPU training step in a CUDA graph (--no-cuda-graph: false)
  bool prepack_weights = true;  // bf16/fp16 on a GPU: pack every layer's 16-bit weight copy once a step
  double clip_grad_norm = 0.0;  // 0 = no clipping
  std::string lr_scaling = "none";  // none | linear | sqrt (data-parallel)
  int64_t log_every = 50;       // steps between log lines when not on a terminal
  OptimizerSpec optimizer;
  ScheduleSpec schedule;
  CheckpointSpec checkpoint;
  EarlyStoppingSpec early_stopping;
  Value config;
};

struct EvalSpec {
  bool ten_crop = false;
  int64_t batch_size = 256;
  bool test_every_epoch = false;  // also evaluate the test split after every epoch (logged, never used to choose)
  Value config;
};

struct DistSpec {
  double bucket_mb = 25.0;
  double timeout_s = 300.0;
  std::string compress = "none";  // none | bf16
  bool sync_batchnorm = false;
  Value config;
};

struct ModelSpec {
  std::string file;                     // the model file as given
  std::string name;
  InputSpec input;
  std::vector<std::string> classes;     // may be empty: then "class0".."classK-1"
  std::vector<LayerSpec> layers;
  LossSpec loss;
  DataSpec data;
  TrainSpec train;
  EvalSpec eval;
  DistSpec dist;
  Value config;  // the whole resolved config with locations; to_yaml(config) is a run's config.yaml
};

// Each layer type's own keys (besides name, type, inputs, backend and algo, which every layer
// has), as the layer registry declares them.
using LayerSchemas = std::map<std::string, Schema>;

// The model file's schema: every section, and the layer maps checked against `layers`.
std::shared_ptr<const Schema> model_schema(const LayerSchemas& layers);

// Reads the file, applies each "--set key=value" override, checks everything against the schema
// and the cross-key rules (crop within the input, one weight per class, ...). ConfigError on any
// problem. The result is fully resolved: to_yaml(spec.config) holds every default.
ModelSpec load_model_spec(const std::string& path, const std::vector<std::string>& overrides,
                          const LayerSchemas& layers);
ModelSpec parse_model_text(const std::string& yaml, const std::string& file,
                           const std::vector<std::string>& overrides, const LayerSchemas& layers);
// From an already-parsed tree (overrides applied).
ModelSpec parse_model_spec(const Value& root, const std::string& file, const LayerSchemas& layers);

// train.autotune without a model file (cnn-bench conv): "train.autotune.KEY=VALUE" overrides
// checked against the same declarations as a model file's, every key not given at its declared
// default. Any other key is a ConfigError.
AutotuneSpec parse_autotune_overrides(const std::vector<std::string>& overrides);

// Sets the class names (found by the data when the model file names none) in the spec and in its
// resolved config.
void set_classes(ModelSpec& spec, const std::vector<std::string>& names);

// Markdown reference of every key (`cnn-train validate --keys`; the README holds a copy).
std::string model_reference_markdown(const LayerSchemas& layers);

}  // namespace cnn
