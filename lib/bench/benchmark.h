// `cnn-bench model`: training-step throughput of a model on synthetic data (no loader, no
// disk), timed around whole optimizer steps after warm-up, median over repeats; optionally a
// per-layer forward/backward table. The step is model/train_step.h, exactly what training runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model_spec.h"

namespace cnn {

struct ModelBenchOptions {
  std::string device = "auto";
  int64_t batch = 0;   // 0: train.batch_size
  int64_t warmup = 5;  // steps before timing
  int64_t steps = 20;  // steps per repeat
  int64_t repeats = 5;
  bool layers = false;  // per-layer table
  // Before any update: the initial parameters and buffers, the synthetic batch, the logits,
  // the loss and every gradient of one training-mode step, as safetensors (for
  // tools/compare_pytorch.py). Tensor names: <param>, input, labels (I32), logits,
  // grad.<param>; metadata: config, loss.
  std::string dump_path;
};

struct LayerTiming {
  std::string name, type, backend, detail;
  double forward_ms = 0, backward_ms = 0;
  // How the implementation was chosen: per conv direction "forward cuda:x (autotuned: 1.31x over
  // cudnn:y)", or one line for a measured backend; empty when there was nothing to choose.
  std::vector<std::string> choice;
};

struct ModelBenchResult {
  std::string model, device;
  std::string cuda_graph;  // "on (step captured, N nodes)" or "off (reason)" (train.cuda_graph)
  std::string precision;   // train.precision: fp32 | tf32 (the CPU computes tf32 in FP32)
  int64_t batch = 0;
  int threads = 0;  // CPU threads of the CPU kernels (OMP_NUM_THREADS or the cores); 0 on a GPU
  double step_ms = 0;  // median over repeats of the mean step time
  double images_per_s = 0;
  std::vector<double> repeat_images_per_s;
  double training_gflop_per_image = 0;
  std::vector<LayerTiming> layers;
  nlohmann::json to_json() const;
  std::string to_table() const;
};

ModelBenchResult bench_model(ModelSpec spec, const ModelBenchOptions& options);

}  // namespace cnn
