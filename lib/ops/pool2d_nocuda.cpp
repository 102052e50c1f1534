// Stand-ins for the CUDA entry points of pool2d where pool2d_cuda.cu is not built (a CPU-only
// build): each throws, so asking for the cuda backend fails loudly, never silently.
#include "core/error.h"
#include "ops/pool2d.h"

namespace cnn {

void pool2d_forward_cuda(const ExecContext& ctx, const Pool2dShape& sh, const float* x, float* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "pool2d_forward_cuda");
}
void pool2d_backward_cuda(const ExecContext& ctx, const Pool2dShape& sh, const float* x, const float* y,
                          const float* dy, float* dx) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "pool2d_backward_cuda");
}

}  // namespace cnn
