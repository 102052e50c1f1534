// Stand-ins for every cuDNN entry point of lib/ops in a build without CUDA: each throws, so asking
// for the cudnn backend fails loudly, never silently; the algorithm list is empty.
#include "core/error.h"
#include "ops/batchnorm.h"
#include "ops/conv2d_algo.h"
#include "ops/cudnn_ops.h"
#include "ops/pool2d.h"
#include "ops/softmax_cross_entropy.h"

namespace cnn {

bool cudnn_ops_built() { return false; }

std::vector<ConvAlgo> conv2d_cudnn_algos() { return {}; }
bool conv2d_cudnn_algo_accurate(ConvDir dir, const std::string& name, const Conv2dShape& sh) { return false; }

#define CNN_NO_CUDNN(fn) CNN_THROW("{} called but this build has no cuDNN (CNN_WITH_CUDA=OFF)", fn)

bool conv2d_cudnn_supports(const Conv2dShape& sh) { return false; }
void conv2d_forward_cudnn(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w, const float* b,
                          float* y) {
  CNN_NO_CUDNN("conv2d_forward_cudnn");
}
void conv2d_backward_cudnn(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                           const float* dy, float* dx, float* dw, float* db) {
  CNN_NO_CUDNN("conv2d_backward_cudnn");
}

bool pool2d_cudnn_supports(const Pool2dShape& sh) { return false; }
void pool2d_forward_cudnn(const ExecContext& ctx, const Pool2dShape& sh, const float* x, float* y) {
  CNN_NO_CUDNN("pool2d_forward_cudnn");
}
void pool2d_backward_cudnn(const ExecContext& ctx, const Pool2dShape& sh, const float* x, const float* y,
                           const float* dy, float* dx) {
  CNN_NO_CUDNN("pool2d_backward_cudnn");
}

bool batchnorm_cudnn_supports(const BatchnormShape& sh) { return false; }
void batchnorm_forward_train_cudnn(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* gamma,
                                   const float* beta, float* y, float* running_mean, float* running_var,
                                   float* save_mean, float* save_inv_std) {
  CNN_NO_CUDNN("batchnorm_forward_train_cudnn");
}
void batchnorm_forward_infer_cudnn(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* gamma,
                                   const float* beta, const float* running_mean, const float* running_var, float* y) {
  CNN_NO_CUDNN("batchnorm_forward_infer_cudnn");
}
void batchnorm_backward_cudnn(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* gamma,
                              const float* save_mean, const float* save_inv_std, const float* dy, float* dx,
                              float* dgamma, float* dbeta) {
  CNN_NO_CUDNN("batchnorm_backward_cudnn");
}

bool softmax_cross_entropy_cudnn_supports(const SoftmaxCrossEntropyShape& sh) { return false; }
double softmax_cross_entropy_forward_cudnn(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                           const float* logits, const int32_t* labels, const float* class_weights,
                                           float* probs, float* sample_loss) {
  CNN_NO_CUDNN("softmax_cross_entropy_forward_cudnn");
}
void softmax_cross_entropy_backward_cudnn(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                          const float* probs, const int32_t* labels, const float* class_weights,
                                          float* dlogits) {
  CNN_NO_CUDNN("softmax_cross_entropy_backward_cudnn");
}

}  // namespace cnn
