// Stand-ins for the CUDA entry points of add where add_cuda.cu is not built (a CPU-only
// build): each throws, so asking for the cuda backend fails loudly, never silently.
#include "core/error.h"
#include "ops/add.h"

namespace cnn {

void add_forward_cuda(const ExecContext& ctx, int64_t n, int count, const float* const* xs, float* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "add_forward_cuda");
}
void add_backward_cuda(const ExecContext& ctx, int64_t n, int count, const float* dy, float* const* dxs) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "add_backward_cuda");
}

}  // namespace cnn
