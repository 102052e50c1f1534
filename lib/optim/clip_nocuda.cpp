// Stand-ins for the CUDA entry points of clip.h where clip_cuda.cu is not built (a CPU-only
// build): each throws, so a CUDA context fails loudly, never silently.
#include "core/error.h"
#include "optim/clip.h"

namespace cnn {

[[noreturn]] static void no_cuda(const char* fn) {
  CNN_THROW("{} called but this build has no CUDA kernels for it", fn);
}

double global_grad_norm_cuda(const ExecContext& ctx, const float* grads, int64_t n) {
  no_cuda("global_grad_norm_cuda");
}
double clip_grad_norm_cuda(const ExecContext& ctx, float* grads, int64_t n, double max_norm) {
  no_cuda("clip_grad_norm_cuda");
}
bool all_finite_cuda(const ExecContext& ctx, const float* x, int64_t n) { no_cuda("all_finite_cuda"); }
void clip_grad_norm_cuda_async(const ExecContext& ctx, float* grads, int64_t n, double max_norm, double* norm) {
  no_cuda("clip_grad_norm_cuda_async");
}

}  // namespace cnn
