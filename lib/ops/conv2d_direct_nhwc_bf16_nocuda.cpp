// Stand-ins for the CUDA entry points of conv2d_direct_nhwc_bf16 where conv2d_direct_nhwc_bf16_cuda.cu
// is not built (a CPU-only build): each throws, so asking for them fails loudly, never silently.
#include "core/error.h"
#include "ops/conv2d_direct_nhwc_bf16.h"

namespace cnn {

void conv2d_forward_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x, const bf16* w,
                                     const float* b, bf16* y, bool relu, DirectNhwcKernel) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_forward_direct_nhwc_cuda");
}
void conv2d_forward_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* w,
                                     const float* b, f16* y, bool relu, DirectNhwcKernel) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_forward_direct_nhwc_cuda");
}
void conv2d_backward_data_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* w, const bf16* dy,
                                           bf16* dx, DirectNhwcKernel) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_backward_data_direct_nhwc_cuda");
}
void conv2d_backward_data_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* w, const f16* dy,
                                           f16* dx, DirectNhwcKernel) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_backward_data_direct_nhwc_cuda");
}
void conv2d_backward_filter_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x,
                                             const bf16* dy, float* dw, float* db, DirectNhwcKernel) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_backward_filter_direct_nhwc_cuda");
}
void conv2d_backward_filter_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* dy,
                                             float* dw, float* db, DirectNhwcKernel) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_backward_filter_direct_nhwc_cuda");
}

}  // namespace cnn
