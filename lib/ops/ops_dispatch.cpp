// Backend dispatch of every op: one line per entry point, so layers never switch on backends
// themselves. A backend this build lacks throws (*_nocuda.cpp), never silently falls back.
#include "core/error.h"
#include "ops/conv2d.h"

namespace cnn {
namespace {

// The same for ops that also have a cuDNN entry point (*_cudnn.cpp; cudnn_ops_nocuda.cpp throws
// in a build without it).
template <typename Cpu, typename Cuda, typename Cudnn, typename... Args>
void dispatch_cudnn(Backend b, Cpu cpu, Cuda cuda, Cudnn cudnn, Args&&... args) {
  switch (b) {
    case Backend::cpu:
      return cpu(std::forward<Args>(args)...);
    case Backend::cuda:
      return cuda(std::forward<Args>(args)...);
    case Backend::cudnn:
      return cudnn(std::forward<Args>(args)...);
  }
}

}  // namespace

void conv2d_forward(Backend backend, const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                    const float* b, float* y) {
  dispatch_cudnn(backend, conv2d_forward_cpu, conv2d_forward_cuda, conv2d_forward_cudnn, ctx, sh, x, w, b, y);
}
void conv2d_backward(Backend backend, const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                     const float* dy, float* dx, float* dw, float* db) {
  dispatch_cudnn(backend, conv2d_backward_cpu, conv2d_backward_cuda, conv2d_backward_cudnn, ctx, sh, x, w, dy, dx, dw,
                 db);
}
}  // namespace cnn
