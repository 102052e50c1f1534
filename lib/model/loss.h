// The training loss of the `loss:` section on top of the network's class scores: softmax
// cross-entropy with label smoothing and class weights (none, balanced, or a list).
// Balanced weights are n / (K * count_k) over the training split (scikit-learn's formula); a
// class absent from the training split gets weight 0 and a warning.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace cnn {

struct Dataset;
struct SoftmaxCrossEntropyShape;

class LossFunction {
public:
  LossFunction(const LossSpec& spec, int64_t num_classes, const Dataset& train);
  // On ctx.device: logits (n, K), labels (n) (device memory on cuda) -> probs (n, K),
  // sample_loss (n) may be null; returns the (weighted) batch loss (synchronises on cuda).
  double forward(const ExecContext& ctx, const float* logits, const int32_t* labels, int64_t n, float* probs,
                 float* sample_loss) const;
  // CUDA only, capturable: the same forward without synchronising; the batch loss (as float) goes to
  // the device scalar batch_loss (non-finite for a label outside [0, K), no throw).
  void forward_async(const ExecContext& ctx, const float* logits, const int32_t* labels, int64_t n, float* probs,
                     float* batch_loss) const;
  // probs (n, K) from forward -> dlogits (n, K)
  void backward(const ExecContext& ctx, const float* probs, const int32_t* labels, int64_t n, float* dlogits) const;
  const std::vector<float>& class_weights() const { return m_weights; }  // empty: none
  std::string describe() const;

private:
  LossSpec m_spec;
  int64_t m_classes;
  std::vector<float> m_weights;
  mutable Tensor m_weights_device;  // copy of m_weights on the GPU, made on first use
  const float* weights_on(const ExecContext& ctx) const;
  SoftmaxCrossEntropyShape shape(int64_t n) const;
};

}  // namespace cnn
