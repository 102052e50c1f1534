// Stand-in for conv2d_fft_cuda.cu in a build without CUDA: the strategy implements nothing and
// running it throws, so asking for it fails loudly, never silently.
#include "core/error.h"
#include "ops/conv2d_strategies.h"

namespace cnn {

bool conv2d_cuda_fft_can_implement(const Conv2dShape& sh, ConvDir dir) { return false; }
size_t conv2d_cuda_fft_workspace_bytes(const Conv2dShape& sh, ConvDir dir) { return 0; }
size_t conv2d_cuda_fft_work_bytes_outside_workspace(const ExecContext& ctx) { return 0; }
void conv2d_cuda_fft_run(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const ConvOperands& op) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_cuda_fft_run");
}
void conv2d_cuda_fft_transpose(void*, const float*, float*, int64_t, int64_t) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_cuda_fft_transpose");
}

}  // namespace cnn
