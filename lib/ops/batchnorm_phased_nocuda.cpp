// Stand-ins for the CUDA entry points of phased batchnorm where batchnorm_phased_cuda.cu is not
// built (a CPU-only build): each throws, so asking for the cuda backend fails loudly.
#include "core/error.h"
#include "ops/batchnorm.h"

namespace cnn {

void batchnorm_forward_stats_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                  const float* running_mean, double* stats) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "batchnorm_forward_stats_cuda");
}
void batchnorm_forward_apply_cuda(const ExecContext& ctx, const BatchnormShape& sh, const double* stats,
                                  const float* x, const float* gamma, const float* beta, const ActivationParams* act,
                                  float* y, float* running_mean, float* running_var, float* save_mean,
                                  float* save_inv_std) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "batchnorm_forward_apply_cuda");
}
void batchnorm_forward_infer_act_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                      const float* gamma, const float* beta, const float* running_mean,
                                      const float* running_var, const ActivationParams* act, float* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "batchnorm_forward_infer_act_cuda");
}
void batchnorm_backward_stats_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* y,
                                   const ActivationParams* act, const float* save_mean, const float* save_inv_std,
                                   const float* dy, double* sums, float* dgamma, float* dbeta) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "batchnorm_backward_stats_cuda");
}
void batchnorm_backward_apply_cuda(const ExecContext& ctx, const BatchnormShape& sh, const double* sums,
                                   const float* x, const float* y, const ActivationParams* act, const float* gamma,
                                   const float* save_mean, const float* save_inv_std, const float* dy, float* dx) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "batchnorm_backward_apply_cuda");
}

}  // namespace cnn
