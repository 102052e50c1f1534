// The model stack (see model_stack.h).
#include "model/model_stack.h"

#include "core/error.h"

namespace cnn {

void ModelStack::missing(const char* what) { CNN_THROW("the model stack has no {} yet", what); }

ModelStack::ModelStack(const ModelSpec& spec) : m_graph(Graph::build(spec)) {}

ModelStack::ModelStack(std::unique_ptr<Graph> graph) : m_graph(std::move(graph)) {
  CNN_CHECK(m_graph != nullptr, "a model stack needs a graph");
}

DeviceSetup& ModelStack::place(const std::string& requested, bool deterministic) {
  m_dev = std::make_unique<DeviceSetup>(requested, *m_graph, deterministic);
  return *m_dev;
}

DeviceSetup& ModelStack::place(Device device, bool deterministic, int gpu_index, int cpu_threads) {
  m_dev = std::make_unique<DeviceSetup>(device, *m_graph, deterministic, gpu_index, cpu_threads);
  return *m_dev;
}

AutotuneStats ModelStack::autotune(int64_t batch, const AutotuneOptions& options) {
  CNN_CHECK(m_ex == nullptr, "autotune the model stack before building its executor");
  return device().autotune(*m_graph, batch, options);
}

Executor& ModelStack::build_executor(int64_t max_batch, bool training) {
  m_ex = std::make_unique<Executor>(*m_graph, max_batch, ctx(), training);
  return *m_ex;
}

Executor& ModelStack::build_inference(const ModelSpec& spec, const std::string& device, int64_t rows) {
  place(device, spec.train.deterministic);
  autotune(rows, AutotuneOptions::from_spec(spec.train.autotune));
  return build_executor(rows, false);
}

Optimizer& ModelStack::build_optimizer(const OptimizerSpec& spec) {
  m_optim = make_graph_optimizer(*m_graph, spec, ctx().device);
  return *m_optim;
}

LossFunction& ModelStack::build_loss(const LossSpec& spec, const Dataset& train) {
  m_loss = std::make_unique<LossFunction>(spec, m_graph->num_classes(), train);
  return *m_loss;
}

TrainStep& ModelStack::build_step(double clip_grad_norm, const LossScaleSpec* loss_scale) {
  m_step = std::make_unique<TrainStep>(executor(), loss(), optimizer(), clip_grad_norm);
  m_scaler = loss_scale ? std::make_unique<LossScaler>(*loss_scale, ctx()) : nullptr;
  m_step->set_loss_scaler(m_scaler.get());
  return *m_step;
}

std::unique_ptr<Optimizer> make_graph_optimizer(const Graph& graph, const OptimizerSpec& spec, Device device) {
  std::vector<ParamSegment> segs;
  for (const ParamEntry& e : graph.params())
    if (e.trainable) segs.emplace_back(e.name, e.offset, e.shape.numel(), e.decay, e.shape);
  return make_optimizer(spec, std::move(segs), graph.params_size(), device);
}

}  // namespace cnn
