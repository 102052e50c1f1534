// Stand-ins for the CUDA entry points of concat where concat_cuda.cu is not built (a CPU-only
// build): each throws, so asking for the cuda backend fails loudly, never silently.
#include "core/error.h"
#include "ops/concat.h"

namespace cnn {

void concat_forward_cuda(const ExecContext& ctx, const ConcatShape& sh, const float* const* xs, float* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "concat_forward_cuda");
}
void concat_backward_cuda(const ExecContext& ctx, const ConcatShape& sh, const float* dy, float* const* dxs) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "concat_backward_cuda");
}

}  // namespace cnn
