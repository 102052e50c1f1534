// Stand-ins for the CUDA entry points of lib/ops in a build without CUDA: each throws, so layer
// code needs no #ifdef and a request for the cuda backend fails loudly, never silently.
#include "core/error.h"
#include "ops/cuda_ops.h"
#include "ops/conv2d.h"
#include "ops/dense.h"
#include "ops/pool2d.h"
#include "ops/activation.h"
#include "ops/batchnorm.h"
#include "ops/dropout.h"
#include "ops/add.h"
#include "ops/concat.h"
#include "ops/softmax_cross_entropy.h"

namespace cnn {

[[noreturn]] static void no_cuda(const char* fn) { CNN_THROW("{} called but this build has no CUDA support", fn); }

bool cuda_ops_built() { return false; }

void conv2d_forward_cuda(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                        const float* b, float* y) {
  no_cuda("conv2d_forward_cuda");
}
void conv2d_backward_cuda(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                         const float* dy, float* dx, float* dw, float* db) {
  no_cuda("conv2d_backward_cuda");
}
void dense_forward_cuda(const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w, const float* b,
                       float* y) {
  no_cuda("dense_forward_cuda");
}
void dense_backward_cuda(const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w,
                        const float* dy, float* dx, float* dw, float* db) {
  no_cuda("dense_backward_cuda");
}
void pool2d_forward_cuda(const ExecContext& ctx, const Pool2dShape& sh, const float* x, float* y) {
  no_cuda("pool2d_forward_cuda");
}
void pool2d_backward_cuda(const ExecContext& ctx, const Pool2dShape& sh, const float* x, const float* y,
                         const float* dy, float* dx) {
  no_cuda("pool2d_backward_cuda");
}
void activation_forward_cuda(const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x, float* y) {
  no_cuda("activation_forward_cuda");
}
void activation_backward_cuda(const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x,
                             const float* y, const float* dy, float* dx) {
  no_cuda("activation_backward_cuda");
}
void batchnorm_forward_train_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                 const float* gamma, const float* beta, float* y, float* running_mean,
                                 float* running_var, float* save_mean, float* save_inv_std) {
  no_cuda("batchnorm_forward_train_cuda");
}
void batchnorm_forward_infer_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                 const float* gamma, const float* beta, const float* running_mean,
                                 const float* running_var, float* y) {
  no_cuda("batchnorm_forward_infer_cuda");
}
void batchnorm_backward_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* gamma,
                            const float* save_mean, const float* save_inv_std, const float* dy, float* dx,
                            float* dgamma, float* dbeta) {
  no_cuda("batchnorm_backward_cuda");
}
void dropout_forward_cuda(const ExecContext& ctx, const DropoutParams& prm, int64_t n, const float* x, float* y) {
  no_cuda("dropout_forward_cuda");
}
void dropout_backward_cuda(const ExecContext& ctx, const DropoutParams& prm, int64_t n, const float* dy, float* dx) {
  no_cuda("dropout_backward_cuda");
}
void add_forward_cuda(const ExecContext& ctx, int64_t n, int count, const float* const* xs, float* y) {
  no_cuda("add_forward_cuda");
}
void add_backward_cuda(const ExecContext& ctx, int64_t n, int count, const float* dy, float* const* dxs) {
  no_cuda("add_backward_cuda");
}
void concat_forward_cuda(const ExecContext& ctx, const ConcatShape& sh, const float* const* xs, float* y) {
  no_cuda("concat_forward_cuda");
}
void concat_backward_cuda(const ExecContext& ctx, const ConcatShape& sh, const float* dy, float* const* dxs) {
  no_cuda("concat_backward_cuda");
}
double softmax_cross_entropy_forward_cuda(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                         const float* logits, const int32_t* labels, const float* class_weights,
                                         float* probs, float* sample_loss) {
  no_cuda("softmax_cross_entropy_forward_cuda");
}
void softmax_cross_entropy_backward_cuda(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                        const float* probs, const int32_t* labels, const float* class_weights,
                                        float* dlogits) {
  no_cuda("softmax_cross_entropy_backward_cuda");
}

}  // namespace cnn
