// Stand-ins for the CUDA entry points of cast_bf16 where cast_bf16_cuda.cu is not built (a
// CPU-only build): each throws, so asking for the GPU conversion fails loudly, never silently.
#include "core/error.h"
#include "ops/cast_bf16.h"

namespace cnn {

void cast_float_to_bf16_cuda(const ExecContext& ctx, int64_t n, const float* x, bf16* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "cast_float_to_bf16_cuda");
}
void cast_bf16_to_float_cuda(const ExecContext& ctx, int64_t n, const bf16* x, float* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "cast_bf16_to_float_cuda");
}

void cast_float_to_f16_cuda(const ExecContext& ctx, int64_t n, const float* x, f16* y) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "cast_float_to_f16_cuda");
}

}  // namespace cnn
