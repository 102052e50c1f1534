// Model benchmark (see benchmark.h).
#include "bench/benchmark.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>

#include "bench/kernel_trace.h"
#include "graph/timer.h"
#include "checkpoint/safetensors.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "model/model_stack.h"
#include "tune/autotune.h"

namespace cnn {

// What the end-to-end inference figure includes (time_inference).
static const char* const kEndToEnd =
    "a float batch copied from host memory, the forward, the logits copied to host memory, as cnn-eval";

static void dump_first_step(const std::string& path, const ModelSpec& spec, Executor& ex, const LossFunction& loss,
                            const std::vector<int32_t>& labels) {
  const Graph& g = ex.graph();
  const int64_t n = ex.max_batch(), K = g.num_classes();
  SafetensorsWriter w;
  for (size_t i = 0; i < g.params().size(); ++i) {  // before the forward updates running stats
    std::vector<float> v = ex.param(int(i)).to_vector();
    w.add_f32(g.params()[i].name, g.params()[i].shape.dims(), v.data());
  }
  std::vector<float> input = ex.input().to_vector();
  w.add_f32("input", ex.input().shape().dims(), input.data());
  w.add("labels", DType::i32, {n}, labels.data(), labels.size() * sizeof(int32_t));
  Tensor dev_labels = Tensor::empty(Shape{n}, ex.context().device);
  device_memcpy(dev_labels.data(), ex.context().device, labels.data(), Device::cpu, labels.size() * sizeof(int32_t));
  Tensor probs = Tensor::empty(Shape{n, K}, ex.context().device);
  ex.forward(n, true, 0, spec.train.seed);
  std::vector<float> logits = ex.output().to_vector();
  const int32_t* lab = reinterpret_cast<const int32_t*>(dev_labels.data());
  double l = loss.forward(ex.context(), ex.output().data(), lab, n, probs.data(), nullptr);
  loss.backward(ex.context(), probs.data(), lab, n, ex.output_grad().data());
  ex.backward();
  w.add_f32("logits", {n, K}, logits.data());
  for (size_t i = 0; i < g.params().size(); ++i) {
    if (!g.params()[i].trainable) continue;
    std::vector<float> v = ex.grad(int(i)).to_vector();
    w.add_f32("grad." + g.params()[i].name, g.params()[i].shape.dims(), v.data());
  }
  w.set_metadata("config", to_yaml(spec.config));
  w.set_metadata("loss", fmt::format("{:.17g}", l));
  w.write_atomic(path);
  // Restore the initial running statistics so the benchmark starts from the dumped state.
  ex.init_params(spec.train.seed);
  spdlog::info("wrote the first training step to '{}' (loss {:.6f})", path, l);
}

// "f32cl 14, f32 1": the layers' activation dtypes and their counts, in first-seen order.
static std::string activation_dtype_counts(const Graph& g) {
  std::vector<std::pair<DType, int>> counts;
  for (int i = 0; i < g.size(); ++i) {
    const DType t = g.node(i).layer->dtype();
    auto it = std::find_if(counts.begin(), counts.end(), [t](const auto& c) { return c.first == t; });
    if (it == counts.end()) counts.push_back({t, 1});
    else ++it->second;
  }
  std::string out;
  for (const auto& [t, n] : counts) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", to_string(t), n);
  return out;
}

ModelBenchResult bench_model(ModelSpec spec, const ModelBenchOptions& opt) {
  if (opt.inference) return bench_inference(spec, opt);
  const int64_t batch = opt.batch > 0 ? opt.batch : spec.train.batch_size;
  ModelStack stack(spec);
  Graph* graph = &stack.graph();
  DeviceSetup& dev = stack.place(opt.device, spec.train.deterministic);
  stack.autotune(batch, AutotuneOptions::from_spec(spec.train.autotune));
  Executor& ex = stack.build_executor(batch);
  ex.init_params(spec.train.seed);
  stack.build_optimizer(spec.train.optimizer);
  Dataset none;
  LossSpec loss_spec = spec.loss;
  if (loss_spec.class_weights == "balanced") loss_spec.class_weights = "none";  // no data to balance
  const LossFunction& loss = stack.build_loss(loss_spec, none);
  TrainStep& step = stack.build_step(spec.train.clip_grad_norm, loss_scale_for(spec.train));
  if (!spec.train.cuda_graph) step.set_cuda_graph(false, "--no-cuda-graph");

  // Synthetic batch: normal inputs, uniform labels (seeded); never zeros.
  Rng rng(spec.train.seed, static_cast<uint64_t>(RngStream::test));
  std::vector<float> input(size_t(ex.input().numel()));
  for (float& v : input) v = rng.normal();
  ex.input().copy_from(Tensor::from_vector(ex.input().shape(), input));
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (auto& y : labels) y = int32_t(rng.below(uint64_t(graph->num_classes())));

  if (!opt.dump_path.empty()) dump_first_step(opt.dump_path, spec, ex, loss, labels);
  // As training feeds it: on a GPU from GPU-resident data (unless data.gpu_resident is off) in the
  // first layer's dtype, so a 16-bit step casts no input; else f32, cast in the step (host loader).
  if (dev.device() == Device::cuda && spec.data.gpu_resident != "off") ex.convert_input(ex.native_input_dtype());
  const double lr = spec.train.optimizer.lr * 1e-3;  // small: keep the weights sane over many steps
  uint64_t s = 0;
  // With a CUDA graph the first step warms up and the second captures: keep both untimed.
  const int64_t warmup = spec.train.cuda_graph && dev.device() == Device::cuda ? std::max<int64_t>(opt.warmup, 2)
                                                                               : opt.warmup;
  for (int64_t i = 0; i < warmup; ++i) step.run(labels.data(), batch, lr, s++, spec.train.seed);
  RegionTimer timer(dev.ctx());
  ModelBenchResult r;
  std::vector<double> step_ms;
  for (int64_t rep = 0; rep < opt.repeats; ++rep) {
    timer.start();
    for (int64_t i = 0; i < opt.steps; ++i) step.run(labels.data(), batch, lr, s++, spec.train.seed);
    step_ms.push_back(timer.stop_ms() / double(opt.steps));
  }
  r.model = spec.name;
  r.device = dev.description();
  r.cuda_graph = step.cuda_graph_status();
  r.precision = spec.train.precision;
  r.input_dtype = to_string(ex.input_dtype());
  r.activation_dtypes = activation_dtype_counts(stack.graph());
  r.weight_packs = ex.weight_packs().describe();
  r.packed_weights_bytes = ex.packed_weights_bytes();
  std::istringstream decisions(autotune_decisions(stack.graph()));
  for (std::string line; std::getline(decisions, line);)
    if (!line.empty()) r.decisions.push_back(line);
  r.batch = batch;
  r.threads = dev.device() == Device::cpu ? dev.ctx().threads() : 0;
  r.timing = BatchTiming::of(step_ms, batch);
  r.gflop_per_image = graph->training_flops() / 1e9;
  if (opt.breakdown) {
    CNN_CHECK(dev.device() == Device::cuda && KernelTrace::available(),
              "--breakdown traces device kernels: it needs a CUDA build on a GPU (device here: {})", dev.description());
    KernelTrace trace;
    trace.start();
    for (int64_t i = 0; i < opt.steps; ++i) step.run(labels.data(), batch, lr, s++, spec.train.seed);
    uint64_t window = 0;
    std::vector<KernelRecord> rec = trace.stop(&window);
    // What ran is what the step says it did (a graph can be off for reasons other than the flag).
    const bool replayed = step.last_step_replayed();
    std::string how =
        replayed ? "captured step (CUDA graph)" : "uncaptured step (CUDA graph " + step.cuda_graph_status() + ")";
    if (rec.empty() && replayed) {
      // This CUPTI reports no kernel nodes of a replayed graph: trace the step uncaptured instead.
      step.set_cuda_graph(false, "--breakdown: the kernel trace saw no kernels of the replayed graph");
      trace.start();
      for (int64_t i = 0; i < opt.steps; ++i) step.run(labels.data(), batch, lr, s++, spec.train.seed);
      rec = trace.stop(&window);
      how = "uncaptured step (the trace saw no kernels of the replayed graph)";
    }
    r.breakdown = make_breakdown(rec, window, opt.steps, how, r.timing.median_ms);
    r.has_breakdown = true;
  }
  if (opt.layers) {
    step.set_cuda_graph(false, "per-layer timing");  // a replay would skip the host-side timer calls
    PerLayerTimer lt(dev.ctx(), graph->size());
    ex.set_layer_timer(&lt);
    for (int64_t i = 0; i < opt.steps; ++i) step.run(labels.data(), batch, lr, s++, spec.train.seed);
    lt.collect();
    ex.set_layer_timer(nullptr);
    for (int i = 0; i < graph->size(); ++i) {
      const Layer& l = *graph->node(i).layer;
      if (graph->node(i).fused_into >= 0) continue;  // timed inside its producer's row
      r.layers.push_back({graph->display_name(i), l.type(), to_string(l.backend()), l.summary(), median(lt.forward_ms()[size_t(i)]),
                          median(lt.backward_ms()[size_t(i)]), describe_conv_plan(l)});
      if (r.layers.back().choice.empty() && l.backend_note().rfind("measured", 0) == 0)
        r.layers.back().choice.push_back(l.backend_note());
    }
  }
  return r;
}

BatchTiming BatchTiming::of(const std::vector<double>& repeat_ms, int64_t batch) {
  CNN_CHECK(!repeat_ms.empty(), "a batch timing needs at least one repeat");
  BatchTiming t;
  t.median_ms = median(repeat_ms);
  t.min_ms = *std::min_element(repeat_ms.begin(), repeat_ms.end());
  t.max_ms = *std::max_element(repeat_ms.begin(), repeat_ms.end());
  t.images_per_s = 1000.0 * double(batch) / t.median_ms;
  for (double ms : repeat_ms) t.repeat_images_per_s.push_back(1000.0 * double(batch) / ms);
  return t;
}

nlohmann::json BatchTiming::to_json() const {
  return {{"step_ms", median_ms},
          {"step_ms_min", min_ms},
          {"step_ms_max", max_ms},
          {"img_per_s", images_per_s},
          {"repeat_img_per_s", repeat_images_per_s}};
}

InferenceTiming time_inference(Executor& ex, int64_t batch, const std::vector<float>& host_batch,
                               const ModelBenchOptions& opt) {
  CNN_CHECK(batch >= 1 && batch <= ex.max_batch(), "inference batch {} for an executor planned for {}", batch,
            ex.max_batch());
  const size_t bytes = host_batch.size() * sizeof(float);
  CNN_CHECK(int64_t(host_batch.size()) == ex.input().numel() / ex.max_batch() * batch,
            "host batch of {} values, the executor's input takes {} a sample", host_batch.size(),
            ex.input().numel() / ex.max_batch());
  CNN_CHECK(ex.input().dtype() == DType::f32, "the executor's input is {}, expected f32", to_string(ex.input().dtype()));
  // Exactly cnn-eval's calls (eval/predict.cpp Predictor::probabilities, eval/evaluate.cpp).
  auto forward = [&] { ex.forward(batch, false, 0, 0); };
  auto end_to_end = [&] {
    device_memcpy(ex.input().data(), ex.input().device(), host_batch.data(), Device::cpu, bytes);
    ex.forward(batch, false, 0, 0);
    const std::vector<float> logits = ex.output().to_vector();  // (batch, K)
    CNN_CHECK(!logits.empty(), "no logits");
  };
  InferenceTiming t;
  device_memcpy(ex.input().data(), ex.input().device(), host_batch.data(), Device::cpu, bytes);
  for (int64_t i = 0; i < opt.warmup; ++i) forward();
  RegionTimer timer(ex.context());
  std::vector<double> ms;
  for (int64_t rep = 0; rep < opt.repeats; ++rep) {
    timer.start();
    for (int64_t i = 0; i < opt.steps; ++i) forward();
    ms.push_back(timer.stop_ms() / double(opt.steps));
  }
  t.on_device = BatchTiming::of(ms, batch);
  // The copies are synchronous and the last one waits for the forward: the host's clock is right.
  for (int64_t i = 0; i < opt.warmup; ++i) end_to_end();
  ms.clear();
  for (int64_t rep = 0; rep < opt.repeats; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < opt.steps; ++i) end_to_end();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
                 double(opt.steps));
  }
  t.end_to_end = BatchTiming::of(ms, batch);
  return t;
}

ModelBenchResult bench_inference(const ModelSpec& spec, const ModelBenchOptions& opt) {
  auto refuse = [](const char* flag, const char* why) {
    throw ConfigError({"<command line>"}, "",
                      fmt::format("{} does not go with --inference: {}; run it without --inference", flag, why));
  };
  if (opt.breakdown) refuse("--breakdown", "it splits a training step into kernel categories");
  if (opt.layers) refuse("--layers", "its table times each layer's forward and backward of a training step");
  if (!opt.dump_path.empty()) refuse("--dump", "it writes a training step's gradients");
  const int64_t batch = opt.batch > 0 ? opt.batch : spec.train.batch_size;
  ModelStack stack(spec);
  Executor& ex = stack.build_inference(spec, opt.device, batch);
  ex.init_params(spec.train.seed);
  const DeviceSetup& dev = stack.device();
  // Synthetic batch: normal inputs (seeded), as the training benchmark's.
  Rng rng(spec.train.seed, static_cast<uint64_t>(RngStream::test));
  std::vector<float> host_batch(size_t(ex.input().numel() / ex.max_batch() * batch));
  for (float& v : host_batch) v = rng.normal();
  const InferenceTiming t = time_inference(ex, batch, host_batch, opt);

  ModelBenchResult r;
  r.mode = "inference";
  r.model = spec.name;
  r.device = dev.description();
  r.cuda_graph = dev.device() == Device::cuda ? "off (cnn-eval runs its forward passes uncaptured)" : "off (CPU run)";
  r.precision = spec.train.precision;
  r.batch = batch;
  r.threads = dev.device() == Device::cpu ? dev.ctx().threads() : 0;
  r.timing = t.on_device;
  r.gflop_per_image = stack.graph().forward_flops() / 1e9;
  r.input = fmt::format("synthetic batch already in the executor's input on the {} (no copies timed)",
                        dev.device() == Device::cuda ? "GPU" : "CPU");
  r.end_to_end = t.end_to_end;
  return r;
}

StepBreakdown make_breakdown(const std::vector<KernelRecord>& records, uint64_t window_ns, int64_t steps,
                             std::string how, double untraced_step_ms) {
  CNN_CHECK(steps > 0, "a step breakdown needs at least one step");
  StepBreakdown b;
  b.steps = steps;
  b.how = std::move(how);
  const double per = 1e-6 / double(steps);  // ns over all steps -> ms per step
  b.traced_step_ms = double(window_ns) * per;
  b.busy_ms = double(busy_ns(records)) * per;
  b.idle_ms = std::max(0.0, b.traced_step_ms - b.busy_ms);
  b.untraced_step_ms = untraced_step_ms;
  b.untraced_idle_ms = std::max(0.0, untraced_step_ms - b.busy_ms);
  b.kernels_per_step = double(records.size()) / double(steps);
  std::map<std::string, std::pair<int64_t, uint64_t>> cat, kern;
  for (const auto& r : records) {
    const uint64_t d = r.end_ns > r.start_ns ? r.end_ns - r.start_ns : 0;
    auto& c = cat[kernel_category(r.name)];
    c.first += 1;
    c.second += d;
    auto& k = kern[r.name];
    k.first += 1;
    k.second += d;
  }
  auto rows = [&](const std::map<std::string, std::pair<int64_t, uint64_t>>& m, size_t keep) {
    std::vector<StepBreakdown::Row> v;
    for (const auto& [name, cd] : m) v.push_back({name, double(cd.first) / double(steps), double(cd.second) * per});
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.ms_per_step > b.ms_per_step; });
    if (v.size() > keep) v.resize(keep);
    return v;
  };
  b.categories = rows(cat, cat.size());
  b.top_kernels = rows(kern, 15);
  return b;
}

nlohmann::json StepBreakdown::to_json() const {
  auto rows = [](const std::vector<Row>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& r : v)
      a.push_back({{"name", r.name}, {"kernels_per_step", r.kernels_per_step}, {"ms_per_step", r.ms_per_step}});
    return a;
  };
  return {{"steps", steps},           {"how", how},
          {"traced_step_ms", traced_step_ms}, {"busy_ms", busy_ms},
          {"idle_ms", idle_ms},       {"kernels_per_step", kernels_per_step},
          {"untraced_step_ms", untraced_step_ms}, {"untraced_idle_ms", untraced_idle_ms},
          {"categories", rows(categories)}, {"top_kernels", rows(top_kernels)}};
}

std::string StepBreakdown::to_table() const {
  std::string out = fmt::format(
      "step breakdown over {} traced steps ({}): {:.3f} ms/step traced, {:.1f} kernels/step\n"
      "  kernels busy {:.3f} ms; idle (launch gaps, host work) {:.3f} ms traced",
      steps, how, traced_step_ms, kernels_per_step, busy_ms, idle_ms);
  if (untraced_step_ms > 0)
    out += fmt::format(", {:.3f} ms ({:.1f}%) of the untraced {:.3f} ms step", untraced_idle_ms,
                       100 * untraced_idle_ms / untraced_step_ms, untraced_step_ms);
  out += "\n";
  out += fmt::format("  {:<20}  {:>9}  {:>9}  {:>6}\n", "category", "kernels", "ms", "of busy");
  for (const auto& r : categories)
    out += fmt::format("  {:<20}  {:>9.1f}  {:>9.4f}  {:>5.1f}%\n", r.name, r.kernels_per_step, r.ms_per_step,
                       busy_ms > 0 ? 100 * r.ms_per_step / busy_ms : 0.0);
  out += "  longest kernels (per step: count, ms, mean us):\n";
  for (const auto& r : top_kernels) {
    std::string n = r.name.size() > 110 ? r.name.substr(0, 107) + "..." : r.name;
    out += fmt::format("  {:>6.1f}  {:>8.4f}  {:>8.1f}  {}\n", r.kernels_per_step, r.ms_per_step,
                       r.kernels_per_step > 0 ? 1e3 * r.ms_per_step / r.kernels_per_step : 0.0, n);
  }
  return out;
}

nlohmann::json ModelBenchResult::to_json() const {
  nlohmann::json j{{"mode", mode},           {"model", model},       {"device", device},
                   {"batch", batch},         {"threads", threads},   {"cuda_graph", cuda_graph},
                   {"precision", precision}};
  j.update(timing.to_json());
  if (mode == "inference") {
    j["inference_gflop_per_image"] = gflop_per_image;
    j["input"] = input;
    j["end_to_end"] = end_to_end.to_json();
    j["end_to_end"]["what"] = kEndToEnd;
  } else {
    j["training_gflop_per_image"] = gflop_per_image;
    j["input_dtype"] = input_dtype;
    j["activation_dtypes"] = activation_dtypes;
    j["weight_packs"] = weight_packs;
    j["packed_weights_bytes"] = packed_weights_bytes;
    j["decisions"] = decisions;
  }
  if (has_breakdown) j["breakdown"] = breakdown.to_json();
  j["layers"] = nlohmann::json::array();
  for (const auto& l : layers)
    j["layers"].push_back({{"name", l.name},
                           {"type", l.type},
                           {"backend", l.backend},
                           {"detail", l.detail},
                           {"forward_ms", l.forward_ms},
                           {"backward_ms", l.backward_ms},
                           {"choice", l.choice}});
  return j;
}

std::string ModelBenchResult::to_table() const {
  const double tflops = gflop_per_image * timing.images_per_s / 1e3;
  if (mode == "inference") {
    auto spread = [](const BatchTiming& t) {
      return fmt::format("{:.3f} ms/batch (min {:.3f}, max {:.3f} over {} repeats), {:.0f} img/s", t.median_ms,
                         t.min_ms, t.max_ms, t.repeat_images_per_s.size(), t.images_per_s);
    };
    return fmt::format("{} on {}, batch {}, precision {}, inference: {} ({:.2f} TFLOP/s), CUDA graph {}\n"
                       "  input: {}\n  end to end ({}): {}\n",
                       model, device, batch, precision, spread(timing), tflops, cuda_graph, input, kEndToEnd,
                       spread(end_to_end));
  }
  std::string out =
      fmt::format("{} on {}, batch {}, precision {}: {:.3f} ms/step, {:.0f} img/s ({:.2f} TFLOP/s), CUDA graph {}\n",
                  model, device, batch, precision, timing.median_ms, timing.images_per_s, tflops, cuda_graph);
  if (precision == "bf16" || precision == "fp16")
    out += fmt::format("input batch: {}; weight packs: {}\n", input_dtype, weight_packs);
  if (precision != "fp32") out += fmt::format("activations: {}\n", activation_dtypes);
  if (has_breakdown) out += breakdown.to_table();
  if (layers.empty()) return out;
  double total = 0;
  for (const auto& l : layers) total += l.forward_ms + l.backward_ms;
  size_t w = 5;
  for (const auto& l : layers) w = std::max(w, l.name.size());
  out += fmt::format("{:<{}}  {:<14}  {:<7}  {:>9}  {:>9}  {:>6}  {}\n", "layer", w, "type", "backend", "fwd ms",
                     "bwd ms", "share", "details");
  for (const auto& l : layers)
    out += fmt::format("{:<{}}  {:<14}  {:<7}  {:>9.4f}  {:>9.4f}  {:>5.1f}%  {}\n", l.name, w, l.type, l.backend,
                       l.forward_ms, l.backward_ms, total > 0 ? 100 * (l.forward_ms + l.backward_ms) / total : 0.0,
                       l.detail);
  for (const auto& l : layers)
    for (const std::string& c : l.choice) out += fmt::format("  {:<{}}  {}\n", l.name, w, c);
  out += fmt::format("sum of layers: {:.3f} ms of {:.3f} ms per step (the rest: loss, optimizer, copies)\n", total,
                     timing.median_ms);
  return out;
}

}  // namespace cnn
