// Stand-ins for the CUDA entry points of the loss scaler where loss_scaler_cuda.cu is not built (a
// CPU-only build): each throws, so a CUDA run fails loudly, never silently.
#include "core/error.h"
#include "optim/loss_scaler.h"

namespace cnn {

void loss_scale_multiply_cuda(const ExecContext&, float*, int64_t, const LossScaleState*) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "loss_scale_multiply_cuda");
}

void loss_scale_unscale_cuda(const ExecContext&, float*, int64_t, LossScaleState*, int64_t, const float*) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "loss_scale_unscale_cuda");
}

void loss_scale_copy_cuda(const ExecContext&, void*, const void*, bool) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", "loss_scale_copy_cuda");
}

}  // namespace cnn
