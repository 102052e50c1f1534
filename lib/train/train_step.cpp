// One training step (see train_step.h).
#include "train/train_step.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "dist/bucket_math.h"
#include "optim/clip.h"

namespace cnn {

static_assert(sizeof(int32_t) == sizeof(float), "labels share float-sized device slots");

TrainStep::TrainStep(Executor& ex, const LossFunction& loss, Optimizer& optimizer, double clip_grad_norm)
    : m_ex(ex), m_loss(loss), m_opt(optimizer), m_clip(clip_grad_norm) {
  Device d = ex.context().device;
  m_labels = Tensor::empty(Shape{ex.max_batch()}, d, "labels");
  m_probs = Tensor::empty(Shape{ex.max_batch(), ex.graph().num_classes()}, d, "probabilities");
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
  device_memcpy(m_labels.data(), ctx.device, labels, Device::cpu, size_t(n) * sizeof(int32_t));
  const int32_t* dev_labels = reinterpret_cast<const int32_t*>(m_labels.data());
  m_ex.forward(n, true, step, seed);
  Result r;
  r.loss = m_loss.forward(ctx, m_ex.output().data(), dev_labels, n, m_probs.data(), nullptr);
  if (!std::isfinite(r.loss)) return r;
  m_loss.backward(ctx, m_probs.data(), dev_labels, n, m_ex.output_grad().data());
  m_ex.backward();
  update(lr);
  return read_result(labels, n, r.loss);
}

TrainStep::Result TrainStep::forward_backward(const int32_t* labels, int64_t n, uint64_t step, uint64_t seed,
                                              GradReducer& reducer, double grad_weight, Watchdog* watchdog) {
  const ExecContext& ctx = m_ex.context();
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
      m_ex.backward(reducer.hook());
      reducer.finish();
      return read_result(labels, n, r.loss);
    }
  }
  phase(Phase::backward);
  Tensor& g = m_ex.grads();
  device_memset_zero(g.device(), g.data(), g.bytes());
  reducer.reduce_all();
  return r;
}

void TrainStep::update(double lr) {
  const ExecContext& ctx = m_ex.context();
  if (m_clip > 0) clip_grad_norm(ctx, m_ex.grads().data(), m_ex.graph().params_size(), m_clip);
  m_opt.step(ctx, m_ex.params().data(), m_ex.grads().data(), lr);
}

}  // namespace cnn
