// One training step (see train_step.h).
#include "model/train_step.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "dist/bucket_math.h"
#include "optim/clip.h"

namespace cnn {

static_assert(sizeof(int32_t) == sizeof(float), "labels share float-sized device slots");

// Everything of one step that kernels read and that changes between steps (labels follow it).
struct TrainStep::StepParams {
  uint64_t seed_step[2];   // dropout: run seed, global step
  StepConstants optimizer;  // learning rate, Adam's bias corrections, ... of this step
};

namespace {

// The executor's dropout reads its seed and step from `seed_step` (device memory) while this lives.
class DeviceSeedStep {
 public:
  DeviceSeedStep(Executor& ex, const uint64_t* seed_step) : m_ex(ex) { m_ex.set_device_seed_step(seed_step); }
  ~DeviceSeedStep() { m_ex.set_device_seed_step(nullptr); }
  DeviceSeedStep(const DeviceSeedStep&) = delete;
  DeviceSeedStep& operator=(const DeviceSeedStep&) = delete;

 private:
  Executor& m_ex;
};

}  // namespace

static size_t round_up(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }
static Shape float_slots(size_t bytes) { return Shape{int64_t(round_up(bytes, sizeof(float)) / sizeof(float))}; }

TrainStep::TrainStep(Executor& ex, const LossFunction& loss, Optimizer& optimizer, double clip_grad_norm)
    : m_ex(ex), m_loss(loss), m_opt(optimizer), m_clip(clip_grad_norm) {
  Device d = ex.context().device;
  m_labels = Tensor::empty(Shape{ex.max_batch()}, d, "labels");
  m_probs = Tensor::empty(Shape{ex.max_batch(), ex.graph().num_classes()}, d, "probabilities");
  if (d != Device::cuda) {
    m_graph_on = false;
    m_graph_off_reason = "CPU run";
    return;
  }
  m_labels_offset = round_up(sizeof(StepParams), 16);
  const size_t in_bytes = m_labels_offset + size_t(ex.max_batch()) * sizeof(int32_t);
  m_stage_in = std::make_unique<PinnedBuffer>(in_bytes, "training step parameters (staging)");
  m_dev_in = Tensor::empty(float_slots(in_bytes), d, "training step parameters and labels");
  m_scaler_offset = round_up(sizeof(float) * size_t(1 + m_probs.numel()), 16);
  m_stage_out = std::make_unique<PinnedBuffer>(m_scaler_offset + sizeof(LossScaleState),
                                               "training step results (staging)");
  m_dev_loss = Tensor::empty(Shape{1}, d, "training step loss");
  m_dev_norm = Tensor::empty(float_slots(sizeof(double)), d, "gradient norm");
}

void TrainStep::set_cuda_graph(bool on, const std::string& reason) {
  if (m_ex.context().device != Device::cuda) return;
  m_graph_on = on;
  m_graph_off_reason = on ? "" : reason;
  if (!on) m_graphs.clear();
}

std::string TrainStep::cuda_graph_status() const {
  if (!m_graph_on) return "off (" + m_graph_off_reason + ")";
  if (m_device_reduce) {
    if (m_graph_nodes == 0)
      return "on (data-parallel step captured from the second step of each batch size: forward, loss, backward and "
             "gradient means; the update runs uncaptured; not captured yet)";
    return fmt::format("on (data-parallel step captured: forward, loss, backward and gradient means, {} nodes)",
                       m_graph_nodes);
  }
  if (m_graph_nodes == 0) return "on (not captured yet)";
  return fmt::format("on (step captured, {} nodes)", m_graph_nodes);
}

TrainStep::Result TrainStep::read_result(const int32_t* labels, int64_t n, double loss) {
  const ExecContext& ctx = m_ex.context();
  const int64_t K = m_ex.graph().num_classes();
  Result r;
  r.loss = loss;
  m_host_probs.resize(size_t(n * K));
  device_memcpy(m_host_probs.data(), Device::cpu, m_probs.data(), ctx.device, m_host_probs.size() * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    const float* p = m_host_probs.data() + i * K;
    r.correct += (std::max_element(p, p + K) - p) == labels[i] ? 1 : 0;
  }
  return r;
}

TrainStep::Result TrainStep::run(const int32_t* labels, int64_t n, double lr, uint64_t step, uint64_t seed) {
  const ExecContext& ctx = m_ex.context();
  if (ctx.device == Device::cuda) return run_cuda(labels, n, lr, step, seed);
  device_memcpy(m_labels.data(), ctx.device, labels, Device::cpu, size_t(n) * sizeof(int32_t));
  const int32_t* dev_labels = reinterpret_cast<const int32_t*>(m_labels.data());
  m_ex.forward(n, true, step, seed);
  Result r;
  r.loss = m_loss.forward(ctx, m_ex.output().data(), dev_labels, n, m_probs.data(), nullptr);
  if (!std::isfinite(r.loss)) return r;
  m_loss.backward(ctx, m_probs.data(), dev_labels, n, m_ex.output_grad().data());
  if (m_scaler) m_scaler->scale_gradient(ctx, m_ex.output_grad().data(), n * m_ex.graph().num_classes());
  m_ex.backward();
  if (m_scaler) unscale_now(r, r.loss);
  update(lr);
  r = Result{r.loss, read_result(labels, n, r.loss).correct, r.skipped};
  return r;
}

void TrainStep::unscale_now(Result& r, double loss) {
  const ExecContext& ctx = m_ex.context();
  // On the GPU (the synchronous data-parallel path) the loss is a host value: a non-finite one
  // stops the run anyway, so the device check treats it as finite.
  const float host_loss = float(loss);
  m_scaler->unscale_and_update(ctx, m_ex.grads().data(), m_ex.graph().params_size(),
                               ctx.device == Device::cuda ? nullptr : &host_loss);
  r.skipped = m_scaler->read(ctx).found_inf != 0;
}

TrainStep::Result TrainStep::forward_backward(const int32_t* labels, int64_t n, uint64_t step, uint64_t seed,
                                              GradReducer& reducer, double grad_weight, Watchdog* watchdog) {
  const ExecContext& ctx = m_ex.context();
  m_last_replayed = false;
  if (n > 0 && m_device_reduce && ctx.device == Device::cuda)
    return forward_backward_cuda(labels, n, step, seed, reducer, grad_weight, watchdog);
  auto phase = [&](Phase p) {
    if (watchdog) watchdog->set_phase(p);
  };
  Result r;
  if (n > 0) {
    phase(Phase::forward);
    device_memcpy(m_labels.data(), ctx.device, labels, Device::cpu, size_t(n) * sizeof(int32_t));
    const int32_t* dev_labels = reinterpret_cast<const int32_t*>(m_labels.data());
    m_ex.forward(n, true, step, seed);
    r.loss = m_loss.forward(ctx, m_ex.output().data(), dev_labels, n, m_probs.data(), nullptr);
    if (std::isfinite(r.loss)) {
      phase(Phase::backward);
      m_loss.backward(ctx, m_probs.data(), dev_labels, n, m_ex.output_grad().data());
      if (grad_weight != 1.0) scale_buffer(ctx, m_ex.output_grad().data(), m_ex.output_grad().numel(), float(grad_weight));
      if (m_scaler) m_scaler->scale_gradient(ctx, m_ex.output_grad().data(), n * m_ex.graph().num_classes());
      m_ex.backward(reducer.hook());
      reducer.finish();
      Result done = read_result(labels, n, r.loss);
      if (m_scaler) unscale_now(done, done.loss);
      return done;
    }
  }
  phase(Phase::backward);
  Tensor& g = m_ex.grads();
  device_memset_zero(g.device(), g.data(), g.bytes());
  if (m_sync_batchnorm)
    join_sync_idle(n > 0, step, seed, reducer);
  else
    reducer.reduce_all();
  if (m_scaler) unscale_now(r, r.loss);  // the other ranks' means: every rank decides alike
  return r;
}

// The collectives of a full step without its work: the forward's batchnorm sums in layer order
// (unless the forward ran), then from the last node back each layer's backward sums followed by
// its gradients' buckets, exactly as Executor::backward with the reducer's hook would issue them.
void TrainStep::join_sync_idle(bool forward_ran, uint64_t step, uint64_t seed, GradReducer& reducer) {
  Graph& graph = m_ex.graph();
  RunContext rc{&m_ex.context(), true, seed, step};
  if (!forward_ran)
    for (int i = 0; i < graph.size(); ++i) graph.node(i).layer->join_sync_idle(rc, false);
  for (int i = graph.size() - 1; i >= 0; --i) {
    graph.node(i).layer->join_sync_idle(rc, true);
    for (int p : graph.node(i).params)
      if (graph.params()[size_t(p)].trainable) reducer.on_ready(p);
  }
  reducer.finish();
}

void TrainStep::update(double lr) {
  const ExecContext& ctx = m_ex.context();
  if (m_scaler && m_scaler->last().found_inf) return;  // skipped: the gradients overflowed
  if (m_clip > 0) clip_grad_norm(ctx, m_ex.grads().data(), m_ex.graph().params_size(), m_clip);
  m_opt.step(ctx, m_ex.params().data(), m_ex.grads().data(), lr);
}

TrainStep::Result TrainStep::run_cuda(const int32_t* labels, int64_t n, double lr, uint64_t step, uint64_t seed) {
  const ExecContext& ctx = m_ex.context();
  stage_step(labels, n, step, seed);
  static_cast<StepParams*>(m_stage_in->data())->optimizer = m_opt.advance(lr);
  m_last_replayed = false;
  {
    DeviceSeedStep bound(m_ex, reinterpret_cast<StepParams*>(m_dev_in.data())->seed_step);
    if (!(m_graph_on && replay_cuda(n, [&] { enqueue_cuda(n); }))) enqueue_cuda(n);
  }
  stream_synchronize(ctx);
  Result r = read_staged_result(labels, n);
  if (!std::isfinite(r.loss) || r.skipped) m_opt.set_step_count(m_opt.step_count() - 1);  // the update kernel skipped it
  return r;
}

// The previous step ended with a synchronisation, so the staging buffers are free.
void TrainStep::stage_step(const int32_t* labels, int64_t n, uint64_t step, uint64_t seed) {
  CNN_CHECK(n >= 1 && n <= m_ex.max_batch(), "batch of {} samples, executor planned for at most {}", n,
            m_ex.max_batch());
  auto* staged = static_cast<StepParams*>(m_stage_in->data());
  staged->seed_step[0] = seed;
  staged->seed_step[1] = step;
  std::memcpy(static_cast<char*>(m_stage_in->data()) + m_labels_offset, labels, size_t(n) * sizeof(int32_t));
  m_run_step = step;
  m_run_seed = seed;
}

TrainStep::Result TrainStep::forward_backward_cuda(const int32_t* labels, int64_t n, uint64_t step, uint64_t seed,
                                                   GradReducer& reducer, double grad_weight, Watchdog* watchdog) {
  const ExecContext& ctx = m_ex.context();
  stage_step(labels, n, step, seed);
  if (watchdog) watchdog->set_phase(Phase::forward);
  // grad_weight is a kernel argument: a short global batch's step runs uncaptured.
  const bool capturable = m_graph_on && grad_weight == 1.0;
  {
    DeviceSeedStep bound(m_ex, reinterpret_cast<StepParams*>(m_dev_in.data())->seed_step);
    auto enqueue = [&] { enqueue_dist(n, reducer, grad_weight); };
    if (!(capturable && replay_cuda(n, enqueue))) enqueue();
  }
  if (watchdog) watchdog->set_phase(Phase::backward);  // the wait below ends with the means
  stream_synchronize(ctx);
  return read_staged_result(labels, n);  // update() then skips when the scaler found an overflow
}

void TrainStep::enqueue_dist(int64_t n, GradReducer& reducer, double grad_weight) {
  const ExecContext& ctx = m_ex.context();
  reducer.begin_step();  // a no-op unless an earlier enqueue (a failed capture) stopped half-way
  enqueue_forward_loss(n);
  if (grad_weight != 1.0) scale_buffer(ctx, m_ex.output_grad().data(), m_ex.output_grad().numel(), float(grad_weight));
  m_ex.backward(reducer.hook());
  reducer.finish();
  if (m_scaler) m_scaler->unscale_and_update(ctx, m_ex.grads().data(), m_ex.graph().params_size(), m_dev_loss.data());
  enqueue_results(n);
}

void TrainStep::enqueue_forward_loss(int64_t n) {
  const ExecContext& ctx = m_ex.context();
  char* dev_in = reinterpret_cast<char*>(m_dev_in.data());
  const auto* dev_labels = reinterpret_cast<const int32_t*>(dev_in + m_labels_offset);
  copy_async(ctx, dev_in, m_stage_in->data(), m_labels_offset + size_t(n) * sizeof(int32_t));
  m_ex.forward(n, true, m_run_step, m_run_seed);
  m_loss.forward_async(ctx, m_ex.output().data(), dev_labels, n, m_probs.data(), m_dev_loss.data());
  m_loss.backward(ctx, m_probs.data(), dev_labels, n, m_ex.output_grad().data());
  if (m_scaler) m_scaler->scale_gradient(ctx, m_ex.output_grad().data(), n * m_ex.graph().num_classes());
}

void TrainStep::enqueue_results(int64_t n) {
  const ExecContext& ctx = m_ex.context();
  const int64_t K = m_ex.graph().num_classes();
  float* out = static_cast<float*>(m_stage_out->data());
  copy_async(ctx, out, m_dev_loss.data(), sizeof(float));
  copy_async(ctx, out + 1, m_probs.data(), size_t(n * K) * sizeof(float));
  if (m_scaler)
    copy_async(ctx, static_cast<char*>(m_stage_out->data()) + m_scaler_offset, m_scaler->device_state(),
               sizeof(LossScaleState));
}

// Loss, probabilities and the loss scaler's state as enqueue_cuda/enqueue_dist copied them to
// m_stage_out (stream idle).
TrainStep::Result TrainStep::read_staged_result(const int32_t* labels, int64_t n) {
  const float* out = static_cast<const float*>(m_stage_out->data());
  Result r;
  if (m_scaler) {
    LossScaleState s;
    std::memcpy(&s, static_cast<const char*>(m_stage_out->data()) + m_scaler_offset, sizeof s);
    m_scaler->note(s);
    r.skipped = s.found_inf != 0;
  }
  r.loss = double(out[0]);
  if (!std::isfinite(r.loss)) return r;
  const int64_t K = m_ex.graph().num_classes();
  for (int64_t i = 0; i < n; ++i) {
    const float* p = out + 1 + i * K;
    r.correct += (std::max_element(p, p + K) - p) == labels[i] ? 1 : 0;
  }
  return r;
}

void TrainStep::enqueue_cuda(int64_t n) {
  const ExecContext& ctx = m_ex.context();
  const auto* params = reinterpret_cast<const StepParams*>(m_dev_in.data());
  enqueue_forward_loss(n);
  m_ex.backward();
  if (m_scaler) m_scaler->unscale_and_update(ctx, m_ex.grads().data(), m_ex.graph().params_size(), m_dev_loss.data());
  if (m_clip > 0)
    clip_grad_norm_cuda_async(ctx, m_ex.grads().data(), m_ex.graph().params_size(), m_clip,
                              reinterpret_cast<double*>(m_dev_norm.data()));
  // The scaler's guard is NaN on an overflow and on a non-finite loss alike.
  m_opt.step_from_device(ctx, m_ex.params().data(), m_ex.grads().data(), &params->optimizer,
                         m_scaler ? m_scaler->guard() : m_dev_loss.data());
  enqueue_results(n);
}

bool TrainStep::replay_cuda(int64_t n, const std::function<void()>& enqueue) {
  const ExecContext& ctx = m_ex.context();
  const size_t ws = ctx.workspace ? ctx.workspace->capacity_bytes() : 0;
  if (m_ex.input_dtype() != m_graphs_input) {  // the captured forwards read (or cast) the input otherwise
    m_graphs.clear();
    m_graphs_input = m_ex.input_dtype();
  }
  auto warm = m_warm.find(n);
  if (warm != m_warm.end() && warm->second != ws) {
    // The shared workspace was reallocated (e.g. by an evaluation): captured pointers are stale.
    m_graphs.clear();
    m_warm.clear();
    warm = m_warm.end();
  }
  if (warm == m_warm.end()) {  // warm-up: this step runs uncaptured and sizes everything
    enqueue();
    m_warm[n] = ctx.workspace ? ctx.workspace->capacity_bytes() : 0;
    return true;
  }
  std::unique_ptr<CudaGraph>& graph = m_graphs[n];
  if (!graph) {
    auto g = std::make_unique<CudaGraph>();
    const auto t0 = std::chrono::steady_clock::now();
    try {
      g->begin_capture(ctx);
      enqueue();
      g->end_capture(ctx);
    } catch (const std::exception& e) {
      g->abort_capture(ctx);
      m_graphs.erase(n);
      set_cuda_graph(false, fmt::format("capture failed: {}", e.what()));
      spdlog::warn("CUDA graph: {}; the step runs uncaptured", cuda_graph_status());
      return false;
    }
    if ((ctx.workspace ? ctx.workspace->capacity_bytes() : 0) != ws) {
      m_graphs.erase(n);
      set_cuda_graph(false, "the workspace grew during capture");
      spdlog::warn("CUDA graph: {}; the step runs uncaptured", cuda_graph_status());
      return false;
    }
    const bool first = m_graph_nodes == 0;
    if (m_first_capture.capture_s < 0) {
      const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      m_first_capture = {total - g->instantiate_seconds(), g->instantiate_seconds()};
    }
    m_graph_nodes = g->nodes();
    if (first) spdlog::info("CUDA graph: {} at batch {}", cuda_graph_status(), n);
    else spdlog::debug("CUDA graph: batch {} captured too ({} nodes)", n, g->nodes());
    graph = std::move(g);
  }
  graph->launch(ctx);
  ++m_replays;
  m_last_replayed = true;
  return true;
}

}  // namespace cnn
