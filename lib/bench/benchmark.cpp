// Model benchmark (see benchmark.h).
#include "bench/benchmark.h"

#include <spdlog/spdlog.h>

#include "graph/timer.h"
#include "checkpoint/safetensors.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "model/model_stack.h"

namespace cnn {

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

ModelBenchResult bench_model(ModelSpec spec, const ModelBenchOptions& opt) {
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
  TrainStep& step = stack.build_step(spec.train.clip_grad_norm);
  if (!spec.train.cuda_graph) step.set_cuda_graph(false, "--no-cuda-graph");

  // Synthetic batch: normal inputs, uniform labels (seeded); never zeros.
  Rng rng(spec.train.seed, static_cast<uint64_t>(RngStream::test));
  std::vector<float> input(size_t(ex.input().numel()));
  for (float& v : input) v = rng.normal();
  ex.input().copy_from(Tensor::from_vector(ex.input().shape(), input));
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (auto& y : labels) y = int32_t(rng.below(uint64_t(graph->num_classes())));

  if (!opt.dump_path.empty()) dump_first_step(opt.dump_path, spec, ex, loss, labels);
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
    double ms = timer.stop_ms() / double(opt.steps);
    step_ms.push_back(ms);
    r.repeat_images_per_s.push_back(1000.0 * double(batch) / ms);
  }
  r.model = spec.name;
  r.device = dev.description();
  r.cuda_graph = step.cuda_graph_status();
  r.precision = spec.train.precision;
  r.batch = batch;
  r.threads = dev.device() == Device::cpu ? dev.ctx().threads() : 0;
  r.step_ms = median(step_ms);
  r.images_per_s = 1000.0 * double(batch) / r.step_ms;
  r.training_gflop_per_image = graph->training_flops() / 1e9;
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

nlohmann::json ModelBenchResult::to_json() const {
  nlohmann::json j{{"model", model},
                   {"device", device},
                   {"batch", batch},
                   {"threads", threads},
                   {"cuda_graph", cuda_graph},
                   {"precision", precision},
                   {"step_ms", step_ms},
                   {"img_per_s", images_per_s},
                   {"repeat_img_per_s", repeat_images_per_s},
                   {"training_gflop_per_image", training_gflop_per_image}};
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
  double tflops = training_gflop_per_image * images_per_s / 1e3;
  std::string out =
      fmt::format("{} on {}, batch {}, precision {}: {:.3f} ms/step, {:.0f} img/s ({:.2f} TFLOP/s), CUDA graph {}\n",
                  model, device, batch, precision, step_ms, images_per_s, tflops, cuda_graph);
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
                     step_ms);
  return out;
}

}  // namespace cnn
