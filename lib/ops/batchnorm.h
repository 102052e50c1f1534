// Batch normalisation over (N, H, W) per channel C (Ioffe & Szegedy 2015), PyTorch conventions:
// running = (1 - momentum) * running + momentum * batch_stat, running_var uses the unbiased
// batch variance, normalisation uses the biased one. For dense inputs use H = W = 1.
#pragma once

#include <cstdint>

#include "core/exec_context.h"
#include "ops/backend.h"

namespace cnn {

struct BatchnormShape {
  int64_t N = 0, C = 0, H = 1, W = 1;
  double eps = 1e-5;
  double momentum = 0.1;
};

// Training: batch statistics. x (N, C, H, W), gamma/beta (C) -> y (N, C, H, W);
// updates running_mean/running_var (C) in place; writes save_mean and save_inv_std (C) for backward.
template <typename T>
void batchnorm_forward_train_reference(const ExecContext& ctx, const BatchnormShape& sh, const T* x, const T* gamma,
                                       const T* beta, T* y, T* running_mean, T* running_var, T* save_mean,
                                       T* save_inv_std);
// Evaluation: running statistics.
template <typename T>
void batchnorm_forward_infer_reference(const ExecContext& ctx, const BatchnormShape& sh, const T* x, const T* gamma,
                                       const T* beta, const T* running_mean, const T* running_var, T* y);
// Backward of the training forward: dy -> dx (may be null), dgamma, dbeta (C).
template <typename T>
void batchnorm_backward_reference(const ExecContext& ctx, const BatchnormShape& sh, const T* x, const T* gamma,
                                  const T* save_mean, const T* save_inv_std, const T* dy, T* dx, T* dgamma,
                                  T* dbeta);

void batchnorm_forward_train_cpu(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                 const float* gamma, const float* beta, float* y, float* running_mean,
                                 float* running_var, float* save_mean, float* save_inv_std);
void batchnorm_forward_infer_cpu(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                 const float* gamma, const float* beta, const float* running_mean,
                                 const float* running_var, float* y);
void batchnorm_backward_cpu(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* gamma,
                            const float* save_mean, const float* save_inv_std, const float* dy, float* dx,
                            float* dgamma, float* dbeta);

// CUDA: the same operands on device memory, queued on ctx.cuda_stream (<op>_cuda.cu).
void batchnorm_forward_train_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                 const float* gamma, const float* beta, float* y, float* running_mean,
                                 float* running_var, float* save_mean, float* save_inv_std);
void batchnorm_forward_infer_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                 const float* gamma, const float* beta, const float* running_mean,
                                 const float* running_var, float* y);
void batchnorm_backward_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* gamma,
                            const float* save_mean, const float* save_inv_std, const float* dy, float* dx,
                            float* dgamma, float* dbeta);

// By backend (ops_dispatch.cpp): the function above of that backend.
void batchnorm_forward_train(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                             const float* gamma, const float* beta, float* y, float* running_mean, float* running_var,
                             float* save_mean, float* save_inv_std);
void batchnorm_forward_infer(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                             const float* gamma, const float* beta, const float* running_mean, const float* running_var,
                             float* y);
void batchnorm_backward(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                        const float* gamma, const float* save_mean, const float* save_inv_std, const float* dy,
                        float* dx, float* dgamma, float* dbeta);

}  // namespace cnn
