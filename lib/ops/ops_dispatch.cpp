// Backend dispatch of every op: one line per entry point, so layers never switch on backends
// themselves. A backend this build lacks throws (*_nocuda.cpp), never silently falls back.
#include "core/error.h"
#include "ops/conv2d.h"
#include "ops/dense.h"
#include "ops/pool2d.h"
#include "ops/activation.h"
#include "ops/batchnorm.h"
#include "ops/dropout.h"
#include "ops/add.h"
#include "ops/concat.h"

namespace cnn {
namespace {

template <typename Cpu, typename Cuda, typename... Args>
void dispatch(Backend b, const char* op, Cpu cpu, Cuda cuda, Args&&... args) {
  switch (b) {
    case Backend::cpu:
      return cpu(std::forward<Args>(args)...);
    case Backend::cuda:
      return cuda(std::forward<Args>(args)...);
    default:
      CNN_THROW("{}: backend {} has no implementation of this op", op, to_string(b));
  }
}

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
void dense_forward(Backend backend, const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w,
                   const float* b, float* y) {
  dispatch(backend, "dense forward", dense_forward_cpu, dense_forward_cuda, ctx, sh, x, w, b, y);
}
void dense_backward(Backend backend, const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w,
                    const float* dy, float* dx, float* dw, float* db) {
  dispatch(backend, "dense backward", dense_backward_cpu, dense_backward_cuda, ctx, sh, x, w, dy, dx, dw, db);
}
void pool2d_forward(Backend backend, const ExecContext& ctx, const Pool2dShape& sh, const float* x, float* y) {
  dispatch_cudnn(backend, pool2d_forward_cpu, pool2d_forward_cuda, pool2d_forward_cudnn, ctx, sh, x, y);
}
void pool2d_backward(Backend backend, const ExecContext& ctx, const Pool2dShape& sh, const float* x, const float* y,
                     const float* dy, float* dx) {
  dispatch_cudnn(backend, pool2d_backward_cpu, pool2d_backward_cuda, pool2d_backward_cudnn, ctx, sh, x, y, dy, dx);
}
void batchnorm_forward_train(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                             const float* gamma, const float* beta, float* y, float* running_mean, float* running_var,
                             float* save_mean, float* save_inv_std) {
  dispatch_cudnn(backend, batchnorm_forward_train_cpu, batchnorm_forward_train_cuda, batchnorm_forward_train_cudnn, ctx,
                 sh, x, gamma, beta, y, running_mean, running_var, save_mean, save_inv_std);
}
void batchnorm_forward_infer(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                             const float* gamma, const float* beta, const float* running_mean, const float* running_var,
                             float* y) {
  dispatch_cudnn(backend, batchnorm_forward_infer_cpu, batchnorm_forward_infer_cuda, batchnorm_forward_infer_cudnn, ctx,
                 sh, x, gamma, beta, running_mean, running_var, y);
}
void batchnorm_backward(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                        const float* gamma, const float* save_mean, const float* save_inv_std, const float* dy,
                        float* dx, float* dgamma, float* dbeta) {
  dispatch_cudnn(backend, batchnorm_backward_cpu, batchnorm_backward_cuda, batchnorm_backward_cudnn, ctx, sh, x, gamma,
                 save_mean, save_inv_std, dy, dx, dgamma, dbeta);
}
void batchnorm_forward_stats(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                             const float* running_mean, double* stats) {
  dispatch(backend, "batchnorm forward_stats", batchnorm_forward_stats_cpu, batchnorm_forward_stats_cuda, ctx, sh, x,
           running_mean, stats);
}
void batchnorm_forward_apply(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const double* stats,
                             const float* x, const float* gamma, const float* beta, const ActivationParams* act,
                             float* y, float* running_mean, float* running_var, float* save_mean,
                             float* save_inv_std) {
  dispatch(backend, "batchnorm forward_apply", batchnorm_forward_apply_cpu, batchnorm_forward_apply_cuda, ctx, sh,
           stats, x, gamma, beta, act, y, running_mean, running_var, save_mean, save_inv_std);
}
void batchnorm_forward_infer_act(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                 const float* gamma, const float* beta, const float* running_mean,
                                 const float* running_var, const ActivationParams* act, float* y) {
  dispatch(backend, "batchnorm forward_infer_act", batchnorm_forward_infer_act_cpu, batchnorm_forward_infer_act_cuda,
           ctx, sh, x, gamma, beta, running_mean, running_var, act, y);
}
void batchnorm_backward_stats(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                              const float* y, const ActivationParams* act, const float* save_mean,
                              const float* save_inv_std, const float* dy, double* sums, float* dgamma, float* dbeta) {
  dispatch(backend, "batchnorm backward_stats", batchnorm_backward_stats_cpu, batchnorm_backward_stats_cuda, ctx, sh,
           x, y, act, save_mean, save_inv_std, dy, sums, dgamma, dbeta);
}
void batchnorm_backward_apply(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const double* sums,
                              const float* x, const float* y, const ActivationParams* act, const float* gamma,
                              const float* save_mean, const float* save_inv_std, const float* dy, float* dx) {
  dispatch(backend, "batchnorm backward_apply", batchnorm_backward_apply_cpu, batchnorm_backward_apply_cuda, ctx, sh,
           sums, x, y, act, gamma, save_mean, save_inv_std, dy, dx);
}
void dropout_forward(Backend backend, const ExecContext& ctx, const DropoutParams& prm, int64_t n, const float* x,
                     float* y) {
  dispatch(backend, "dropout forward", dropout_forward_cpu, dropout_forward_cuda, ctx, prm, n, x, y);
}
void dropout_backward(Backend backend, const ExecContext& ctx, const DropoutParams& prm, int64_t n, const float* dy,
                      float* dx) {
  dispatch(backend, "dropout backward", dropout_backward_cpu, dropout_backward_cuda, ctx, prm, n, dy, dx);
}
void add_forward(Backend backend, const ExecContext& ctx, int64_t n, int count, const float* const* xs, float* y) {
  dispatch(backend, "add forward", add_forward_cpu, add_forward_cuda, ctx, n, count, xs, y);
}
void add_backward(Backend backend, const ExecContext& ctx, int64_t n, int count, const float* dy, float* const* dxs) {
  dispatch(backend, "add backward", add_backward_cpu, add_backward_cuda, ctx, n, count, dy, dxs);
}
void concat_forward(Backend backend, const ExecContext& ctx, const ConcatShape& sh, const float* const* xs, float* y) {
  dispatch(backend, "concat forward", concat_forward_cpu, concat_forward_cuda, ctx, sh, xs, y);
}
void concat_backward(Backend backend, const ExecContext& ctx, const ConcatShape& sh, const float* dy,
                     float* const* dxs) {
  dispatch(backend, "concat backward", concat_backward_cpu, concat_backward_cuda, ctx, sh, dy, dxs);
}

}  // namespace cnn
