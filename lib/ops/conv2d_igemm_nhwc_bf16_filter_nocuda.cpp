// Stand-in for the CUDA entry point of the NHWC BF16 filter gradient where
// conv2d_igemm_nhwc_bf16_filter_cuda.cu is not built (a CPU-only build): it throws, never silently.
#include "core/error.h"
#include "ops/conv2d_igemm_nhwc_bf16.h"

namespace cnn {

void conv2d_backward_filter_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x,
                                            const bf16* dy, float* dw, float* db, const IgemmNhwcBf16Plan* plan) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_backward_filter_igemm_nhwc_cuda");
}
void conv2d_backward_filter_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* dy,
                                            float* dw, float* db, const IgemmNhwcBf16Plan* plan) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_backward_filter_igemm_nhwc_cuda");
}

}  // namespace cnn
