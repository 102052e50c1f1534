// Stand-ins for the CUDA entry points of the optimizer where optimizer_cuda.cu is not built (a
// CPU-only build): each throws, so a CUDA optimizer fails loudly, never silently.
#include "core/error.h"
#include "optim/optimizer.h"

namespace cnn {

std::shared_ptr<void> upload_update_plan_cuda(const ExecContext& ctx, const std::vector<UpdateChunk>& plan) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "upload_update_plan_cuda");
}

void fused_update_cuda(const ExecContext& ctx, const UpdateConstants& decayed, const UpdateConstants& plain,
                       const UpdateOperands& ops) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "fused_update_cuda");
}

void fused_update_cuda_device(const ExecContext& ctx, OptimizerKind kind, const StepConstants* dconsts,
                              const float* guard, const UpdateOperands& ops) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "fused_update_cuda_device");
}

}  // namespace cnn
