// Stand-in for the CUDA entry point of conv2d_weights_bf16 where conv2d_weights_bf16_cuda.cu is not
// built (a CPU-only build): it throws, so asking for the GPU packing fails loudly, never silently.
#include "core/error.h"
#include "ops/conv2d_weights_bf16.h"

namespace cnn {

void conv2d_pack_weights_cuda(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout, const float* w,
                              bf16* out) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_pack_weights_cuda");
}
void conv2d_pack_weights_cuda(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout, const float* w,
                              f16* out) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_pack_weights_cuda");
}
void conv2d_pack_weights_batch_cuda(const ExecContext& ctx, const WeightPackEntry* table, int count,
                                    const std::vector<int64_t>& slice_groups) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "conv2d_pack_weights_batch_cuda");
}

}  // namespace cnn
