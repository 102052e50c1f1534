// Softmax cross-entropy with cuDNN's log-softmax (cudnnSoftmaxForward, CUDNN_SOFTMAX_LOG, one
// instance per sample) and our CUDA kernels for the rest: the forward kernel of
// softmax_cross_entropy_cuda.cu gathers the loss from the log-probabilities (their log-sum-exp
// is 0, so its softmax of them gives back the probabilities: softmax(log softmax z) = softmax z),
// and the backward is our kernel outright, because dlogits = w / sum w (p - q) needs only probs
// (cudnnSoftmaxBackward would need dL/dp = -q / p, which overflows where p underflows).
// Trap: the CUDA forward takes its scratch from the context's workspace, which here holds the
// log-probabilities, so it runs on a copy of the context with the cuDNN state's own workspace.
#include <cudnn.h>

#include <memory>

#include "core/error.h"
#include "cudnn/handle.h"
#include "ops/softmax_cross_entropy.h"

namespace cnn {
namespace {

struct SoftmaxDescs {
  cudnn::TensorDescriptor t;  // (N, K, 1, 1)
};

struct SoftmaxCache {
  cudnn::ShapeMemo<SoftmaxDescs> memo;
  std::unique_ptr<Workspace> loss_workspace;  // scratch of the CUDA loss kernels
};

}  // namespace

bool softmax_cross_entropy_cudnn_supports(const SoftmaxCrossEntropyShape& sh) {
  return sh.label_smoothing >= 0.0f && sh.label_smoothing < 1.0f && cudnn::fits_nchw(sh.N, sh.K, 1, 1);
}

void softmax_cross_entropy_forward_cudnn(const SoftmaxCrossEntropyForward& a) {
  const char* what = "softmax_cross_entropy cudnn forward";
  const ExecContext& ctx = *a.ctx;
  const SoftmaxCrossEntropyShape& sh = a.sh;
  const float* logits = a.logits.f32();
  if (!softmax_cross_entropy_cudnn_supports(sh))
    CNN_THROW("{}: N={} K={} label_smoothing={} is outside what cuDNN takes", what, sh.N, sh.K, sh.label_smoothing);
  cudnnHandle_t h = cudnn::handle(ctx, what);
  SoftmaxCache& cache = cudnn::slot<SoftmaxCache>(ctx, cudnn::Slot::softmax);
  SoftmaxDescs& d = cache.memo.get(cudnn::ShapeKey{{sh.N, sh.K}},
                                   [&](SoftmaxDescs& e) { cudnn::set_nchw(e.t, sh.N, sh.K, 1, 1, what); });
  CNN_CHECK(ctx.workspace && ctx.workspace->device() == Device::cuda, "{}: the context has no device workspace", what);
  float* log_probs = ctx.workspace->get(static_cast<size_t>(sh.N * sh.K));  // (N, K)
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(
      cudnnSoftmaxForward(h, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE, &one, d.t, logits, &zero, d.t, log_probs));
  if (!cache.loss_workspace) cache.loss_workspace = std::make_unique<Workspace>(Device::cuda);
  ExecContext loss_ctx = ctx;
  loss_ctx.workspace = cache.loss_workspace.get();
  SoftmaxCrossEntropyForward from_log_probs = a;
  from_log_probs.ctx = &loss_ctx;
  from_log_probs.logits = log_probs;
  run_op(Backend::cuda, from_log_probs);
}

void softmax_cross_entropy_backward_cudnn(const SoftmaxCrossEntropyBackward& a) {
  const char* what = "softmax_cross_entropy cudnn backward";
  const SoftmaxCrossEntropyShape& sh = a.sh;
  if (!softmax_cross_entropy_cudnn_supports(sh))
    CNN_THROW("{}: N={} K={} label_smoothing={} is outside what cuDNN takes", what, sh.N, sh.K, sh.label_smoothing);
  cudnn::handle(*a.ctx, what);
  run_op(Backend::cuda, a);
}

}  // namespace cnn
