// Stand-ins for the CUDA entry points of activation where activation_cuda.cu is not built (a CPU-only
// build): each throws, so asking for the cuda backend fails loudly, never silently.
#include "core/error.h"
#include "ops/activation.h"

namespace cnn {

void activation_forward_cuda(const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x, float* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "activation_forward_cuda");
}
void activation_backward_cuda(const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x,
                              const float* y, const float* dy, float* dx) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "activation_backward_cuda");
}

void activation_backward_from_output_cuda(const ExecContext& ctx, const ActivationParams& p, int64_t n,
                                          const float* y, const float* dy, float* dx) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "activation_backward_from_output_cuda");
}

}  // namespace cnn
