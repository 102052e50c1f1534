// Batch normalisation over (N, H, W) per channel C (Ioffe & Szegedy 2015), PyTorch conventions:
// running = (1 - momentum) * running + momentum * batch_stat, running_var uses the unbiased
// batch variance, normalisation uses the biased one. For dense inputs use H = W = 1.
#pragma once

#include <cstdint>

#include "core/exec_context.h"
#include "ops/activation.h"
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

// Argument checks every backend shares (batchnorm_cpu.cpp); `what` starts the message ("batchnorm
// forward"). check_shape: positive sizes, eps >= 0, momentum in [0, 1]. check_training_count: more
// than one value per channel (the unbiased variance divides by N*H*W - 1).
void batchnorm_check_shape(const char* what, const BatchnormShape& sh);
void batchnorm_check_training_count(const char* what, const BatchnormShape& sh);

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

// cuDNN: the same operands through cuDNN's spatial batchnorm (batchnorm_cudnn.cpp), whose momentum,
// variance and saved-statistics conventions are ours. supports: non-throwing; eps at least cuDNN's
// minimum and C, H, W within its int sizes (N is checked per call).
bool batchnorm_cudnn_supports(const BatchnormShape& sh);
void batchnorm_forward_train_cudnn(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                   const float* gamma, const float* beta, float* y, float* running_mean,
                                   float* running_var, float* save_mean, float* save_inv_std);
void batchnorm_forward_infer_cudnn(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                   const float* gamma, const float* beta, const float* running_mean,
                                   const float* running_var, float* y);
void batchnorm_backward_cudnn(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* gamma,
                              const float* save_mean, const float* save_inv_std, const float* dy, float* dx,
                              float* dgamma, float* dbeta);

// Phased batchnorm, for statistics summed over the ranks of a data-parallel run (sync batchnorm)
// and for a producer with a fused activation (act non-null: y = act(bn(x)), backward takes dy
// through act' read from the saved y). The caller sums the phase's (2C + 1) doubles over the ranks
// between the phases (or not, for a single rank). Sums, not means, so ranks with fewer (or zero)
// samples count exactly; sh.N may be 0 in every phase (the rank joins with zeros).
// Trap: one all-reduce gives the variance as E[d^2] - E[d]^2 of d = x - shift, so the shift must
// be the same on every rank and near the mean: running_mean, read before apply updates it (ranks
// hold identical running statistics; without the shift large-mean channels lose their variance).
// The fused y must stay alive until backward (it is read there).
//   stats (2C + 1): [sum_c d] (C), [sum_c d^2] (C), count N*H*W;  d = x - running_mean[c].
void batchnorm_forward_stats_cpu(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                 const float* running_mean, double* stats);
// From the summed stats: running statistics (unbiased variance over the summed count),
// save_mean/save_inv_std, and y = act(gamma xhat + beta) (act may be null).
void batchnorm_forward_apply_cpu(const ExecContext& ctx, const BatchnormShape& sh, const double* stats,
                                 const float* x, const float* gamma, const float* beta,
                                 const ActivationParams* act, float* y, float* running_mean, float* running_var,
                                 float* save_mean, float* save_inv_std);
// Inference with a fused activation: y = act(batchnorm_forward_infer(x)).
void batchnorm_forward_infer_act_cpu(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                     const float* gamma, const float* beta, const float* running_mean,
                                     const float* running_var, const ActivationParams* act, float* y);
//   sums (2C + 1): [sum_c g] (C), [sum_c g (x - mean)] (C), count N*H*W; g = act'(y) dy (or dy).
// Also writes this rank's dgamma, dbeta (C) (may be null): the gradient reducer sums those.
void batchnorm_backward_stats_cpu(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* y,
                                  const ActivationParams* act, const float* save_mean, const float* save_inv_std,
                                  const float* dy, double* sums, float* dgamma, float* dbeta);
// dx from the summed sums: gamma inv_std (g - sum g / M - (x - mean) inv_std^2 sum g (x - mean) / M).
void batchnorm_backward_apply_cpu(const ExecContext& ctx, const BatchnormShape& sh, const double* sums,
                                  const float* x, const float* y, const ActivationParams* act, const float* gamma,
                                  const float* save_mean, const float* save_inv_std, const float* dy, float* dx);

void batchnorm_forward_stats_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                  const float* running_mean, double* stats);
void batchnorm_forward_apply_cuda(const ExecContext& ctx, const BatchnormShape& sh, const double* stats,
                                  const float* x, const float* gamma, const float* beta,
                                  const ActivationParams* act, float* y, float* running_mean, float* running_var,
                                  float* save_mean, float* save_inv_std);
void batchnorm_forward_infer_act_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                      const float* gamma, const float* beta, const float* running_mean,
                                      const float* running_var, const ActivationParams* act, float* y);
void batchnorm_backward_stats_cuda(const ExecContext& ctx, const BatchnormShape& sh, const float* x, const float* y,
                                   const ActivationParams* act, const float* save_mean, const float* save_inv_std,
                                   const float* dy, double* sums, float* dgamma, float* dbeta);
void batchnorm_backward_apply_cuda(const ExecContext& ctx, const BatchnormShape& sh, const double* sums,
                                   const float* x, const float* y, const ActivationParams* act, const float* gamma,
                                   const float* save_mean, const float* save_inv_std, const float* dy, float* dx);

// By backend (ops_dispatch.cpp): the function above of that backend.
void batchnorm_forward_stats(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                             const float* running_mean, double* stats);
void batchnorm_forward_apply(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const double* stats,
                             const float* x, const float* gamma, const float* beta, const ActivationParams* act,
                             float* y, float* running_mean, float* running_var, float* save_mean,
                             float* save_inv_std);
void batchnorm_forward_infer_act(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                                 const float* gamma, const float* beta, const float* running_mean,
                                 const float* running_var, const ActivationParams* act, float* y);
void batchnorm_backward_stats(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const float* x,
                              const float* y, const ActivationParams* act, const float* save_mean,
                              const float* save_inv_std, const float* dy, double* sums, float* dgamma, float* dbeta);
void batchnorm_backward_apply(Backend backend, const ExecContext& ctx, const BatchnormShape& sh, const double* sums,
                              const float* x, const float* y, const ActivationParams* act, const float* gamma,
                              const float* save_mean, const float* save_inv_std, const float* dy, float* dx);

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
