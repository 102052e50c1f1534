// Stand-ins for the CUDA entry points of softmax_cross_entropy where softmax_cross_entropy_cuda.cu is not built (a
// CPU-only build): each throws, so asking for the cuda backend fails loudly, never silently.
#include "core/error.h"
#include "ops/softmax_cross_entropy.h"

namespace cnn {

double softmax_cross_entropy_forward_cuda(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                          const float* logits, const int32_t* labels, const float* class_weights,
                                          float* probs, float* sample_loss) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "softmax_cross_entropy_forward_cuda");
}
void softmax_cross_entropy_backward_cuda(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh, const float* probs,
                                         const int32_t* labels, const float* class_weights, float* dlogits) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "softmax_cross_entropy_backward_cuda");
}
void softmax_cross_entropy_forward_cuda_async(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                              const float* logits, const int32_t* labels, const float* class_weights,
                                              float* probs, float* sample_loss, float* batch_loss) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "softmax_cross_entropy_forward_cuda_async");
}

}  // namespace cnn
