// Stand-ins for every cuDNN entry point of lib/ops in a build without CUDA: each throws, so asking
// for the cudnn backend fails loudly, never silently; the algorithm list is empty.
#include "core/error.h"
#include "ops/conv2d_algo.h"
#include "ops/cudnn_ops.h"

namespace cnn {

bool cudnn_ops_built() { return false; }

std::vector<ConvAlgo> conv2d_cudnn_algos() { return {}; }
bool conv2d_cudnn_algo_accurate(ConvDir dir, const std::string& name, const Conv2dShape& sh) { return false; }

#define CNN_NO_CUDNN(fn) CNN_THROW("{} called but this build has no cuDNN (CNN_WITH_CUDA=OFF)", fn)

bool conv2d_cudnn_supports(const Conv2dShape& sh) { return false; }
void conv2d_forward_cudnn(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w, const float* b,
                          float* y) {
  CNN_NO_CUDNN("conv2d_forward_cudnn");
}
void conv2d_backward_cudnn(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                           const float* dy, float* dx, float* dw, float* db) {
  CNN_NO_CUDNN("conv2d_backward_cudnn");
}

}  // namespace cnn
