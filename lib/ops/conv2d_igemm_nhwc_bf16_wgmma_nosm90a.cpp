// Stand-in for the sm_90a wgmma kernels of the NHWC BF16 implicit GEMM where
// conv2d_igemm_nhwc_bf16_wgmma_sm90a.cu is not built (no CUDA, or no sm_90 in the build's
// architectures): the wgmma tiles are reported unusable, and the mma.sync tiles stand in.
#include "core/error.h"
#include "ops/conv2d_igemm_nhwc_bf16_wgmma.h"

namespace cnn::igemm_nhwc_bf16_detail {

bool igemm_nhwc_bf16_wgmma_usable() { return false; }

void igemm_nhwc_bf16_wgmma_gather(DType dtype, cudaStream_t stream, int tile, bool data, int splits,
                                  const GatherGemmParams& p, const uint16_t* a_src, const uint16_t* b_src,
                                  const float* bias, uint16_t* out, float* parts) {
  CNN_THROW("{} called but this build has no sm_90a kernels", "igemm_nhwc_bf16_wgmma_gather");
}
void igemm_nhwc_bf16_wgmma_filter(DType dtype, cudaStream_t stream, int tile, int splits, const FilterGemmParams& p,
                                  const uint16_t* x, const uint16_t* dy, float* dw, float* db, float* parts) {
  CNN_THROW("{} called but this build has no sm_90a kernels", "igemm_nhwc_bf16_wgmma_filter");
}

}  // namespace cnn::igemm_nhwc_bf16_detail
