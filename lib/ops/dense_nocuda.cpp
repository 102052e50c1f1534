// Stand-ins for the CUDA entry points of dense where dense_cuda.cu is not built (a CPU-only
// build): each throws, so asking for the cuda backend fails loudly, never silently.
#include "core/error.h"
#include "ops/dense.h"

namespace cnn {

void dense_forward_cuda(const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w, const float* b,
                        float* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "dense_forward_cuda");
}
void dense_backward_cuda(const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w, const float* dy,
                         float* dx, float* dw, float* db) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "dense_backward_cuda");
}

}  // namespace cnn
