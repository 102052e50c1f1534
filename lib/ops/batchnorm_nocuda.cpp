// Stand-ins for the CUDA entry points of batchnorm where batchnorm_cuda.cu is not built (a CPU-only
// build): each throws, so asking for the cuda backend fails loudly, never silently.
#include "core/error.h"
#include "ops/batchnorm.h"

namespace cnn {

void batchnorm_forward_train_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* gamma,
                                  const float* beta, float* y, float* running_mean, float* running_var,
                                  float* save_mean, float* save_inv_std) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "batchnorm_forward_train_cuda");
}
void batchnorm_forward_infer_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* gamma,
                                  const float* beta, const float* running_mean, const float* running_var, float* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "batchnorm_forward_infer_cuda");
}
void batchnorm_backward_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* gamma,
                             const float* save_mean, const float* save_inv_std, const float* dy, float* dx,
                             float* dgamma, float* dbeta) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "batchnorm_backward_cuda");
}

}  // namespace cnn
