// Batch normalisation through cuDNN's spatial batchnorm (cudnnBatchNormalizationForwardTraining /
// ForwardInference / Backward), which shares our conventions: exponentialAverageFactor is our
// momentum (running = (1 - m) running + m batch), running_var takes the unbiased batch variance,
// normalisation the biased one, and the saved "inverse variance" is 1 / sqrt(var + eps), our
// save_inv_std, so a backward may follow a forward of another backend.
// Trap: cuDNN always writes dx, dgamma and dbeta; where ours are null, workspace scratch takes them.
#include <cudnn.h>

#include <algorithm>

#include "core/error.h"
#include "cudnn/handle.h"
#include "ops/batchnorm.h"

namespace cnn {
namespace {

struct BnDescs {
  cudnn::TensorDescriptor x;   // (N, C, H, W), also y, dy, dx
  cudnn::TensorDescriptor bn;  // (1, C, 1, 1): gamma, beta, statistics
};

struct BnCache {
  cudnn::ShapeMemo<BnDescs> memo;
};

void check_shape(const char* what, const BatchnormShape& sh) {
  if (sh.N <= 0 || sh.C <= 0 || sh.H <= 0 || sh.W <= 0)
    CNN_THROW("{}: sizes must be positive, got N={} C={} H={} W={}", what, sh.N, sh.C, sh.H, sh.W);
  if (!batchnorm_cudnn_supports(sh))
    CNN_THROW("{}: cuDNN cannot take N={} C={} H={} W={} eps={} momentum={}", what, sh.N, sh.C, sh.H, sh.W, sh.eps,
              sh.momentum);
}

BnDescs& descs(const ExecContext& ctx, const BatchnormShape& sh, const char* what) {
  check_shape(what, sh);
  const cudnn::ShapeKey key{{sh.N, sh.C, sh.H, sh.W}};
  return cudnn::slot<BnCache>(ctx, cudnn::Slot::batchnorm).memo.get(key, [&](BnDescs& d) {
    cudnn::set_nchw(d.x, sh.N, sh.C, sh.H, sh.W, what);
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(d.bn, d.x, CUDNN_BATCHNORM_SPATIAL));
  });
}

}  // namespace

bool batchnorm_cudnn_supports(const BatchnormShape& sh) {
  if (!(sh.eps >= CUDNN_BN_MIN_EPSILON) || !(sh.momentum >= 0.0 && sh.momentum <= 1.0)) return false;
  return cudnn::fits_nchw(std::max<int64_t>(sh.N, 1), sh.C, sh.H, sh.W);
}

void batchnorm_forward_train_cudnn(const BatchnormForwardTrain& a) {
  const char* what = "batchnorm cudnn forward";
  cudnnHandle_t h = cudnn::handle(*a.ctx, what);
  CNN_CHECK(!a.mean_offset, "{}: cuDNN takes no mean offset (its row's supports() refuses one)", what);
  BnDescs& d = descs(*a.ctx, a.sh, what);
  batchnorm_check_training_count(what, a.sh);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, a.x.f32(), d.x,
                                                     a.y.f32(), d.bn, a.gamma, a.beta, a.sh.momentum, a.running_mean,
                                                     a.running_var, a.sh.eps, a.save_mean, a.save_inv_std));
}

void batchnorm_forward_infer_cudnn(const BatchnormForwardInfer& a) {
  const char* what = "batchnorm cudnn inference";
  CNN_CHECK(!a.mean_offset, "{}: cuDNN takes no mean offset (its row's supports() refuses one)", what);
  cudnnHandle_t h = cudnn::handle(*a.ctx, what);
  BnDescs& d = descs(*a.ctx, a.sh, what);
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, a.x.f32(), d.x,
                                                      a.y.f32(), d.bn, a.gamma, a.beta, a.running_mean, a.running_var,
                                                      a.sh.eps));
}

void batchnorm_backward_cudnn(const BatchnormBackward& a) {
  const char* what = "batchnorm cudnn backward";
  const ExecContext& ctx = *a.ctx;
  const BatchnormShape& sh = a.sh;
  float *dx = a.dx.f32(), *dgamma = a.dgamma, *dbeta = a.dbeta;
  cudnnHandle_t h = cudnn::handle(ctx, what);
  BnDescs& d = descs(ctx, sh, what);
  // Scratch pieces start on 256-byte boundaries, as cudaMalloc'd buffers would.
  auto padded = [](int64_t floats) { return (floats + 63) / 64 * 64; };
  const int64_t numel = sh.N * sh.C * sh.H * sh.W;
  const int64_t need = (dx ? 0 : padded(numel)) + (dgamma ? 0 : padded(sh.C)) + (dbeta ? 0 : padded(sh.C));
  if (need > 0) {
    CNN_CHECK(ctx.workspace && ctx.workspace->device() == Device::cuda, "{}: the context has no device workspace",
              what);
    float* scratch = ctx.workspace->get(static_cast<size_t>(need));
    if (!dx) dx = scratch, scratch += padded(numel);
    if (!dgamma) dgamma = scratch, scratch += padded(sh.C);
    if (!dbeta) dbeta = scratch;
  }
  const float one = 1.0f, zero = 0.0f;
  CUDNN_CHECK(cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, d.x, a.x.f32(), d.x,
                                              a.dy.f32(), d.x, dx, d.bn, a.gamma, dgamma, dbeta, sh.eps, a.save_mean,
                                              a.save_inv_std));
}

}  // namespace cnn
