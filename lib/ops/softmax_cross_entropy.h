// Softmax cross-entropy over K classes with label smoothing and optional class weights.
// Target q = (1 - ls) * onehot(label) + ls / K. Per-sample loss l_n = -sum_k q_k log p_k.
// The batch loss is sum_n w[label_n] * l_n / sum_n w[label_n] (w = 1 without class weights),
// as PyTorch's weighted mean; backward is the gradient of that batch loss.
#pragma once

#include <cstdint>

#include "core/exec_context.h"

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

double softmax_cross_entropy_forward_cpu(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                         const float* logits, const int32_t* labels, const float* class_weights,
                                         float* probs, float* sample_loss);
void softmax_cross_entropy_backward_cpu(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                        const float* probs, const int32_t* labels, const float* class_weights,
                                        float* dlogits);

// CUDA: the same operands on device memory, queued on ctx.cuda_stream (<op>_cuda.cu).
double softmax_cross_entropy_forward_cuda(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                         const float* logits, const int32_t* labels, const float* class_weights,
                                         float* probs, float* sample_loss);
void softmax_cross_entropy_backward_cuda(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                        const float* probs, const int32_t* labels, const float* class_weights,
                                        float* dlogits);

// cuDNN: cuDNN's log-softmax, then the loss gathered and the gradient taken by the CUDA kernels
// above (softmax_cross_entropy_cudnn.cpp); same operands and results. supports: non-throwing.
bool softmax_cross_entropy_cudnn_supports(const SoftmaxCrossEntropyShape& sh);
double softmax_cross_entropy_forward_cudnn(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                           const float* logits, const int32_t* labels, const float* class_weights,
                                           float* probs, float* sample_loss);
void softmax_cross_entropy_backward_cudnn(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                          const float* probs, const int32_t* labels, const float* class_weights,
                                          float* dlogits);

// --- CUDA, capturable: the forward without any host synchronisation (CUDA graphs). ---
// Same operands on device memory (labels int32 on the device); the batch loss goes to the device
// scalar `batch_loss` instead of being returned, reduced in a fixed order (equal to the value the
// synchronous forward returns, rounded to float). The GPU never traps: a label outside [0, K) makes
// that sample's loss NaN, hence a NaN batch loss (and NaN gradients in backward), and bad class
// weights give a non-finite loss; the host checks the loss for finiteness instead.
void softmax_cross_entropy_forward_cuda_async(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                              const float* logits,         // (N, K)
                                              const int32_t* labels,       // (N)
                                              const float* class_weights,  // (K) or null
                                              float* probs,                // (N, K)
                                              float* sample_loss,          // (N) or null
                                              float* batch_loss);          // device scalar

}  // namespace cnn
