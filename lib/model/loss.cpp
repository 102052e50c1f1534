// Loss set-up and dispatch (see loss.h).
#include "model/loss.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "data/dataset.h"
#include "ops/softmax_cross_entropy.h"

namespace cnn {

LossFunction::LossFunction(const LossSpec& spec, int64_t num_classes, const Dataset& train)
    : m_spec(spec), m_classes(num_classes) {
  if (spec.class_weights == "balanced") {
    std::vector<int64_t> hist = class_histogram(train, num_classes);
    for (int64_t k = 0; k < num_classes; ++k) {
      int64_t c = hist[size_t(k)];
      if (!c) spdlog::warn("class {} has no training samples: its loss weight is 0", k);
      m_weights.push_back(c ? float(double(train.size()) / double(num_classes * c)) : 0.0f);
    }
  } else if (spec.class_weights == "list") {
    if (int64_t(spec.class_weight_values.size()) != num_classes)
      throw ConfigError({}, "loss.class_weights",
                        fmt::format("{} class weights given for {} classes", spec.class_weight_values.size(), num_classes));
    for (double w : spec.class_weight_values) m_weights.push_back(float(w));
  }
}

std::string LossFunction::describe() const {
  std::string s = fmt::format("softmax cross-entropy, label smoothing {}", m_spec.label_smoothing);
  if (!m_weights.empty()) {
    s += ", class weights [";
    for (size_t k = 0; k < m_weights.size(); ++k) s += fmt::format("{}{:.3f}", k ? ", " : "", m_weights[k]);
    s += "]";
  }
  return s;
}

const float* LossFunction::weights_on(const ExecContext& ctx) const {
  if (m_weights.empty()) return nullptr;
  if (ctx.device == Device::cpu) return m_weights.data();
  if (!m_weights_device.defined() || m_weights_device.numel() == 0)
    m_weights_device = Tensor::from_vector(Shape{int64_t(m_weights.size())}, m_weights).to(ctx.device);
  return m_weights_device.data();
}

// Our own loss kernels of the context's device, through the op dispatcher like every op.
double LossFunction::forward(const ExecContext& ctx, const float* logits, const int32_t* labels, int64_t n,
                             float* probs, float* sample_loss) const {
  double loss = 0.0;
  run_op(native_backend(ctx.device), SoftmaxCrossEntropyForward{&ctx, shape(n), logits, labels, weights_on(ctx), probs,
                                                                sample_loss, &loss});
  return loss;
}

void LossFunction::forward_async(const ExecContext& ctx, const float* logits, const int32_t* labels, int64_t n,
                                 float* probs, float* batch_loss) const {
  CNN_CHECK(ctx.device == Device::cuda, "the asynchronous loss forward runs on the GPU only");
  run_op(native_backend(ctx.device), SoftmaxCrossEntropyForwardAsync{&ctx, shape(n), logits, labels, weights_on(ctx),
                                                                     probs, nullptr, batch_loss});
}

void LossFunction::backward(const ExecContext& ctx, const float* probs, const int32_t* labels, int64_t n,
                            float* dlogits) const {
  run_op(native_backend(ctx.device),
         SoftmaxCrossEntropyBackward{&ctx, shape(n), probs, labels, weights_on(ctx), dlogits});
}

SoftmaxCrossEntropyShape LossFunction::shape(int64_t n) const {
  return SoftmaxCrossEntropyShape{n, m_classes, float(m_spec.label_smoothing)};
}

}  // namespace cnn
