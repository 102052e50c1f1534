// Stand-ins for the CUDA entry points of conv2d where conv2d_cuda.cu is not built (a CPU-only
// build): each throws, so asking for the cuda backend fails loudly, never silently.
#include "core/error.h"
#include "ops/conv2d.h"

namespace cnn {

void conv2d_forward_cuda(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w, const float* b,
                         float* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_forward_cuda");
}
void conv2d_backward_cuda(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                          const float* dy, float* dx, float* dw, float* db) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_backward_cuda");
}

}  // namespace cnn
