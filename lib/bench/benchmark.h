// `cnn-bench model`: training-step throughput of a model on synthetic data (no loader, no
// disk), timed around whole optimizer steps after warm-up, median over repeats; optionally a
// per-layer forward/backward table. The step is model/train_step.h, exactly what training runs.
// With `inference`, forward passes in evaluation mode on cnn-eval's own stack and call
// (ModelStack::build_inference, Executor::forward(n, false)): no loss, gradients or optimizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/model_spec.h"
#include "graph/executor.h"

namespace cnn {

struct KernelRecord;  // bench/kernel_trace.h

struct ModelBenchOptions {
  std::string device = "auto";
  int64_t batch = 0;   // 0: train.batch_size
  int64_t warmup = 5;  // steps before timing
  int64_t steps = 20;  // steps per repeat
  int64_t repeats = 5;
  bool layers = false;  // per-layer table
  // Trace `steps` more steps (the captured graph where one is used) and split the step's time
  // into kernel categories and idle gaps (StepBreakdown); CUDA builds on a GPU only.
  bool breakdown = false;
  // Before any update: the initial parameters and buffers, the synthetic batch, the logits,
  // the loss and every gradient of one training-mode step, as safetensors (for
  // tools/compare_pytorch.py). Tensor names: <param>, input, labels (I32), logits,
  // grad.<param>; metadata: config, loss.
  std::string dump_path;
  // Time inference instead of training steps (bench_inference); refuses layers, breakdown, dump.
  bool inference = false;
};

// A batch time over repeats: each repeat's mean over its steps, then the median, fastest and
// slowest repeat (ms), and each repeat's images per second.
struct BatchTiming {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double images_per_s = 0;  // batch / median_ms
  std::vector<double> repeat_images_per_s;
  static BatchTiming of(const std::vector<double>& repeat_ms, int64_t batch);
  nlohmann::json to_json() const;  // step_ms, step_ms_min, step_ms_max, img_per_s, repeat_img_per_s
};

// Inference timed two ways, each `opt.warmup` untimed passes, then `opt.repeats` times `opt.steps`:
// on_device: forward(batch, training = false) on the batch already in ex.input(), no copies (the
// device's clock: CUDA events, or the host's on the CPU); end_to_end: each pass as cnn-eval's
// Predictor runs it, host_batch copied from ordinary (pageable) host memory into ex.input(), the
// forward, and the logits copied back to host memory (the host's steady clock).
struct InferenceTiming {
  BatchTiming on_device, end_to_end;
};
InferenceTiming time_inference(Executor& ex, int64_t batch,
                               const std::vector<float>& host_batch,  // (batch, C, H, W)
                               const ModelBenchOptions& opt);

struct LayerTiming {
  std::string name, type, backend, detail;
  double forward_ms = 0, backward_ms = 0;
  // How the implementation was chosen: per conv direction "forward cuda:x (autotuned: 1.31x over
  // cudnn:y)", or one line for a measured backend; empty when there was nothing to choose.
  std::vector<std::string> choice;
};

// Where a step's time goes on the device (--breakdown): the kernels of `steps` traced steps
// (kernel_trace.h), per category (kernel_category) and the top kernels by time, and the step's
// idle time: wall time minus the time some kernel ran (the union of kernel intervals), which is
// launch latency, host work and synchronisation the device waits for. Tracing slows launches, so
// the idle time is given twice: of the traced steps, and of the untraced (timed) step, assuming the
// kernels take as long untraced.
struct StepBreakdown {
  struct Row {
    std::string name;       // category or kernel name
    double kernels_per_step = 0;
    double ms_per_step = 0;  // summed kernel durations (overlapping kernels both count)
  };
  int64_t steps = 0;
  std::string how;                // "captured step (CUDA graph)" or "uncaptured step (reason)"
  double traced_step_ms = 0;      // wall time per step while tracing
  double busy_ms = 0;             // per step: union of kernel intervals
  double idle_ms = 0;             // traced_step_ms - busy_ms
  double untraced_step_ms = 0;    // the benchmark's step time (0: not known)
  double untraced_idle_ms = 0;    // untraced_step_ms - busy_ms, at least 0
  double kernels_per_step = 0;
  std::vector<Row> categories;    // by time, descending
  std::vector<Row> top_kernels;   // the 15 longest in total, descending
  nlohmann::json to_json() const;
  std::string to_table() const;
};

// Splits `records` (kernels of `steps` steps over a window of window_ns) into a StepBreakdown.
StepBreakdown make_breakdown(const std::vector<KernelRecord>& records, uint64_t window_ns, int64_t steps,
                             std::string how, double untraced_step_ms = 0);

struct ModelBenchResult {
  std::string mode = "training";  // training | inference
  std::string model, device;
  std::string cuda_graph;  // "on (step captured, N nodes)" or "off (reason)" (train.cuda_graph)
  std::string precision;   // train.precision: fp32 | tf32 (the CPU computes tf32 in FP32)
  // Training: the dtype of the synthetic batch in the executor's input: the first layer's 16-bit
  // dtype on a GPU unless data.gpu_resident is off (as GPU-resident data feed it: no input cast), else f32.
  std::string input_dtype = "f32";
  // The layers' activation dtypes with their counts, in first-seen order ("f32cl 14, f32 1"): a tf32
  // run's layout (train.tf32_layout) and any layer a precision left in f32.
  std::string activation_dtypes;
  std::string weight_packs;  // the step's prepacked 16-bit weights (Executor::weight_packs().describe())
  int64_t packed_weights_bytes = 0;  // their persistent buffer
  int64_t batch = 0;
  int threads = 0;  // CPU threads of the CPU kernels (OMP_NUM_THREADS or the cores); 0 on a GPU
  BatchTiming timing;  // a step (training) or a forward pass of the batch already on the device (inference)
  // Training: forward and backward (JSON training_gflop_per_image); inference: forward
  // (inference_gflop_per_image).
  double gflop_per_image = 0;
  std::string input;                     // inference: where the timed batch comes from
  BatchTiming end_to_end;                // inference: host batch in, logits out (InferenceTiming)
  std::vector<LayerTiming> layers;
  // Training: the autotuner's resolved decisions (autotune_decisions: a line per layer, "conv NAME
  // FWD BWD_DATA BWD_FILTER" or "backend NAME cuda|cudnn|cpu"), so two runs' picks can be diffed.
  std::vector<std::string> decisions;
  bool has_breakdown = false;
  StepBreakdown breakdown;
  nlohmann::json to_json() const;
  std::string to_table() const;
};

// options.inference: bench_inference, else the training step.
ModelBenchResult bench_model(ModelSpec spec, const ModelBenchOptions& options);
// Forward passes in evaluation mode (time_inference) of a freshly initialised model (seeded by
// train.seed) at options.batch (default train.batch_size) on cnn-eval's stack. Never captured in a
// CUDA graph: cnn-eval runs its forward passes uncaptured, and cuda_graph says so.
ModelBenchResult bench_inference(const ModelSpec& spec, const ModelBenchOptions& options);

}  // namespace cnn
