// Softmax cross-entropy over K classes with label smoothing and optional class weights.
// Target q = (1 - ls) * onehot(label) + ls / K. Per-sample loss l_n = -sum_k q_k log p_k.
// The batch loss is sum_n w[label_n] * l_n / sum_n w[label_n] (w = 1 without class weights),
// as PyTorch's weighted mean; backward is the gradient of that batch loss.
#pragma once

#include <cstdint>

#include "core/exec_context.h"
#include "ops/dispatch.h"

namespace cnn {

struct SoftmaxCrossEntropyShape {
  int64_t N = 0;  // batch
  int64_t K = 0;  // classes
  float label_smoothing = 0.0f;
};

// logits (N, K), labels (N) in [0, K), class_weights (K) or null -> probs (N, K), sample_loss (N);
// returns the batch loss. A label outside [0, K) throws cnn::Error naming the sample.
template <typename T>
double softmax_cross_entropy_forward_reference(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                               const T* logits, const int32_t* labels, const T* class_weights,
                                               T* probs, T* sample_loss);
// probs from forward -> dlogits (N, K)
template <typename T>
void softmax_cross_entropy_backward_reference(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                              const T* probs, const int32_t* labels, const T* class_weights,
                                              T* dlogits);

// Entry points (run_op in ops/dispatch.h; rows in registry.cpp). The logits and their gradient
// follow the activations' dtype (views); probabilities, losses and class weights are FP32 in every
// precision (the loss is always computed in FP32 or double).
struct SoftmaxCrossEntropyForward {
  const ExecContext* ctx = nullptr;
  SoftmaxCrossEntropyShape sh;
  ConstView logits = nullptr;            // (N, K)
  const int32_t* labels = nullptr;       // (N), in [0, K)
  const float* class_weights = nullptr;  // (K) or null
  float* probs = nullptr;                // (N, K)
  float* sample_loss = nullptr;          // (N) or null
  double* batch_loss = nullptr;          // host scalar or null; a cuda call synchronises to fill it
  DType dtype() const { return logits.dtype(); }
  static const OpTable<SoftmaxCrossEntropyForward>& table();
};
struct SoftmaxCrossEntropyBackward {
  const ExecContext* ctx = nullptr;
  SoftmaxCrossEntropyShape sh;
  const float* probs = nullptr;          // (N, K) from forward
  const int32_t* labels = nullptr;       // (N)
  const float* class_weights = nullptr;  // (K) or null
  View dlogits = nullptr;                // (N, K)
  DType dtype() const { return dlogits.dtype(); }
  static const OpTable<SoftmaxCrossEntropyBackward>& table();
};
// The forward without any host synchronisation (CUDA graphs; a cuda row only): the batch loss goes
// to the device scalar batch_loss, reduced in a fixed order (equal to the value the synchronous
// forward gives, rounded to float). The GPU never traps: a label outside [0, K) makes that sample's
// loss NaN, hence a NaN batch loss (and NaN gradients in backward), and bad class weights give a
// non-finite loss; the host checks the loss for finiteness instead.
struct SoftmaxCrossEntropyForwardAsync {
  const ExecContext* ctx = nullptr;
  SoftmaxCrossEntropyShape sh;
  ConstView logits = nullptr;            // (N, K)
  const int32_t* labels = nullptr;       // (N), on the device
  const float* class_weights = nullptr;  // (K) or null
  float* probs = nullptr;                // (N, K)
  float* sample_loss = nullptr;          // (N) or null
  float* batch_loss = nullptr;           // device scalar
  DType dtype() const { return logits.dtype(); }
  static const OpTable<SoftmaxCrossEntropyForwardAsync>& table();
};

// Rows (registry.cpp): cpu (softmax_cross_entropy_cpu.cpp; a label outside [0, K) throws cnn::Error
// naming the sample), cuda (softmax_cross_entropy_cuda.cu, device memory, ctx.cuda_stream), cudnn
// (softmax_cross_entropy_cudnn.cpp: cuDNN's log-softmax, then the loss gathered and the gradient
// taken by the CUDA kernels; same operands and results). The cudnn supports is non-throwing.
bool softmax_cross_entropy_cudnn_supports(const SoftmaxCrossEntropyShape& sh);

}  // namespace cnn
