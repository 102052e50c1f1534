// Stand-ins for the CUDA entry points of conv2d_igemm_nhwc_bf16 (forward, backward data, the device's plan) where
// conv2d_igemm_nhwc_bf16_cuda.cu is not built (a CPU-only build): each throws, never silently.
#include "core/error.h"
#include "ops/conv2d_igemm_nhwc_bf16.h"

namespace cnn {

bool conv2d_igemm_nhwc_bf16_wgmma_usable() { return false; }

IgemmNhwcBf16Plan conv2d_igemm_nhwc_bf16_device_plan(const Conv2dShape& sh, ConvDir dir, size_t workspace_limit) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_igemm_nhwc_bf16_device_plan");
}

void conv2d_forward_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x, const bf16* w,
                                    const float* b, bf16* y, bool relu, const IgemmNhwcBf16Plan* plan) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_forward_igemm_nhwc_cuda");
}
void conv2d_forward_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* w,
                                    const float* b, f16* y, bool relu, const IgemmNhwcBf16Plan* plan) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_forward_igemm_nhwc_cuda");
}
void conv2d_backward_data_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* wt,
                                          const bf16* dy, bf16* dx, const IgemmNhwcBf16Plan* plan) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_backward_data_igemm_nhwc_cuda");
}
void conv2d_backward_data_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* wt, const f16* dy,
                                          f16* dx, const IgemmNhwcBf16Plan* plan) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_backward_data_igemm_nhwc_cuda");
}

}  // namespace cnn
