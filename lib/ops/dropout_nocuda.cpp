// Stand-ins for the CUDA entry points of dropout where dropout_cuda.cu is not built (a CPU-only
// build): each throws, so asking for the cuda backend fails loudly, never silently.
#include "core/error.h"
#include "ops/dropout.h"

namespace cnn {

void dropout_forward_cuda(const ExecContext& ctx, const DropoutParams& prm, int64_t n, const float* x, float* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "dropout_forward_cuda");
}
void dropout_backward_cuda(const ExecContext& ctx, const DropoutParams& prm, int64_t n, const float* dy, float* dx) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "dropout_backward_cuda");
}

}  // namespace cnn
