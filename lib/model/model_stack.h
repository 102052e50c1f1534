// The model stack every program assembles around a model file: the graph, its device and execution
// context (autotuned), the executor, and for training the optimizer, the loss and the step. Each
// use builds the parts it needs, in this order: training all of them, prediction up to the
// executor, the model benchmark all of them, the checkpoint tools only an optimizer on the CPU.
// Trap: autotune() comes before build_executor() (the executor binds the layers' parameters; the
// tuner binds scratch ones), and every later part refers to the earlier ones: the stack owns them
// and must outlive every reference taken from it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "config/model_spec.h"
#include "graph/executor.h"
#include "graph/graph.h"
#include "model/device_setup.h"
#include "model/loss.h"
#include "model/train_step.h"
#include "optim/loss_scaler.h"
#include "optim/optimizer.h"

namespace cnn {

class ModelStack {
 public:
  explicit ModelStack(const ModelSpec& spec);  // builds the graph (Graph::build)
  explicit ModelStack(std::unique_ptr<Graph> graph);
  ModelStack(const ModelStack&) = delete;
  ModelStack& operator=(const ModelStack&) = delete;

  // The device: `requested` is --device auto|cpu|cuda (model/device_setup.h), or one already
  // resolved, with a rank's GPU or share of the cores.
  DeviceSetup& place(const std::string& requested, bool deterministic);
  DeviceSetup& place(Device device, bool deterministic, int gpu_index, int cpu_threads);
  AutotuneStats autotune(int64_t batch, const AutotuneOptions& options);
  // training = false plans for forward passes only (evaluation, prediction).
  Executor& build_executor(int64_t max_batch, bool training = true);
  // The inference stack of cnn-eval and `cnn-bench model --inference`: place on `device` (auto
  // takes the GPU when every layer runs there), autotune for `rows` with spec.train.autotune, and an
  // evaluation-only executor for `rows` (run it as forward(n, false, 0, 0): batchnorm on running
  // statistics, dropout off, no gradients). spec is the one the stack was built from.
  Executor& build_inference(const ModelSpec& spec, const std::string& device, int64_t rows);
  Optimizer& build_optimizer(const OptimizerSpec& spec);  // over the trainable parameters, on the stack's device
  LossFunction& build_loss(const LossSpec& spec, const Dataset& train);
  // loss_scale: the fp16 run's dynamic loss scale (train.loss_scale), null in other precisions.
  TrainStep& build_step(double clip_grad_norm, const LossScaleSpec* loss_scale = nullptr);

  Graph& graph() const { return *m_graph; }
  DeviceSetup& device() const { return need(m_dev, "a device (place)"); }
  bool has_device() const { return m_dev != nullptr; }
  const ExecContext& ctx() const { return device().ctx(); }
  Executor& executor() const { return need(m_ex, "an executor (build_executor)"); }
  Optimizer& optimizer() const { return need(m_optim, "an optimizer (build_optimizer)"); }
  LossFunction& loss() const { return need(m_loss, "a loss (build_loss)"); }
  TrainStep& step() const { return need(m_step, "a step (build_step)"); }
  bool has_step() const { return m_step != nullptr; }
  LossScaler* loss_scaler() const { return m_scaler.get(); }  // null unless built with a loss scale

 private:
  template <class T>
  static T& need(const std::unique_ptr<T>& p, const char* what) {
    if (!p) missing(what);
    return *p;
  }
  [[noreturn]] static void missing(const char* what);

  std::unique_ptr<Graph> m_graph;
  std::unique_ptr<DeviceSetup> m_dev;  // outlives m_ex and everything built on its context
  std::unique_ptr<Executor> m_ex;
  std::unique_ptr<Optimizer> m_optim;
  std::unique_ptr<LossFunction> m_loss;
  std::unique_ptr<LossScaler> m_scaler;
  std::unique_ptr<TrainStep> m_step;
};

// The loss scale a run trains with: train.loss_scale in an fp16 run, else null (no scaler).
inline const LossScaleSpec* loss_scale_for(const TrainSpec& t) {
  return t.precision == "fp16" ? &t.loss_scale : nullptr;
}

// The optimizer the config implies for `graph`'s trainable parameters (no device context needed:
// the checkpoint tools compare its slots against a file).
std::unique_ptr<Optimizer> make_graph_optimizer(const Graph& graph, const OptimizerSpec& spec,
                                                Device device = Device::cpu);

}  // namespace cnn
