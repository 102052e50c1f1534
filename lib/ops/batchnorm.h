// Batch normalisation over (N, H, W) per channel C (Ioffe & Szegedy 2015), PyTorch conventions:
// running = (1 - momentum) * running + momentum * batch_stat, running_var uses the unbiased
// batch variance, normalisation uses the biased one. For dense inputs use H = W = 1.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/exec_context.h"
#include "core/host_device.h"
#include "ops/activation.h"
#include "ops/dispatch.h"

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

// Mean offset (the forward entry points' mean_offset, FP32 (C), null: none): x is a producer's
// output whose per-channel constant `offset` was left out (a conv2d bias folded into this batchnorm,
// Graph::fold_conv_biases), and the running mean keeps meaning the mean of x + offset. So training
// normalises x by its batch mean as always (a per-channel constant does not change the result),
// shifts its sums by running_mean - offset and updates running_mean with batch_mean + offset;
// inference subtracts running_mean - offset. running_var and the backward are unchanged. The shift
// is formed in FP32 (running_mean[c] - offset[c]) the same way by every phase and rank. cuDNN's
// rows take none: their supports() refuses a non-null mean_offset (a layer asks with its own).
CNN_HD float batchnorm_shift_of(const float* running_mean, const float* mean_offset, int64_t c) {
  return mean_offset ? running_mean[c] - mean_offset[c] : running_mean[c];
}
// What a batch of mean `mean` (of x) adds to the running mean.
CNN_HD double batchnorm_running_input(double mean, const float* mean_offset, int64_t c) {
  return mean_offset ? mean + static_cast<double>(mean_offset[c]) : mean;
}

// A sign-only activation's derivative from x (the backward entry points' `beta`, null: not used).
// relu' and leaky_relu' depend only on the sign of the activation's input z, the batchnorm's output
// before the activation. A backward given beta (and, for BatchnormBackwardStats, gamma) takes that
// sign from z recomputed from x as batchnorm_pre_activation(x, save_mean, batchnorm_saved_scale(gamma,
// save_inv_std), beta) and does not read y: one tensor fewer to read in both backward passes. The
// channels-last cuda rows (bf16, f16, f32cl) form their forward's z the same way, so the backward's z
// is the forward's bit for bit; the cpu rows honour beta with the same arithmetic (the f32 NCHW cuda
// rows ignore it and read y). Other activations (elu, sigmoid, tanh) always read y. A layer passes
// beta in every precision but fp32 (whose forward forms z otherwise: fp32 stays as it was).
inline bool batchnorm_sign_only(const ActivationParams* act) {
  return act && (act->kind == ActivationKind::relu || act->kind == ActivationKind::leaky_relu);
}
// Whether a backward row given act, gamma and beta takes act' from x (and reads no y): the one rule
// every row that honours beta applies.
inline bool batchnorm_grad_from_z(const ActivationParams* act, const float* gamma, const float* beta) {
  return batchnorm_sign_only(act) && gamma && beta;
}
// The channels-last forward's per-channel scale, from the FP32 values it saves for the backward.
CNN_HD float batchnorm_saved_scale(float gamma, float save_inv_std) {
  return static_cast<float>(static_cast<double>(gamma) * static_cast<double>(save_inv_std));
}
// z = (x - mean) scale + beta: one rounding of x - mean, then one fused multiply-add.
CNN_HD float batchnorm_pre_activation(float x, float mean, float scale, float beta) {
  return fmaf(x - mean, scale, beta);
}

// Entry points (run_op in ops/dispatch.h; rows in registry.cpp). x, y, dy, dx follow the
// activations' dtype (views); the per-channel parameters, running and saved statistics and their
// gradients are FP32 in every precision (they are few, and the statistics need the range), so they
// are plain float pointers.
struct BatchnormForwardTrain {  // batch statistics
  const ExecContext* ctx = nullptr;
  BatchnormShape sh;
  ConstView x = nullptr;            // (N, C, H, W)
  const float* gamma = nullptr;     // (C)
  const float* beta = nullptr;      // (C)
  View y = nullptr;                 // (N, C, H, W)
  float* running_mean = nullptr;    // (C), updated in place
  float* running_var = nullptr;     // (C), updated in place
  float* save_mean = nullptr;       // (C), written for backward
  float* save_inv_std = nullptr;    // (C), written for backward
  const float* mean_offset = nullptr;  // (C) or null: see "Mean offset" above
  DType dtype() const { return x.dtype(); }
  static const OpTable<BatchnormForwardTrain>& table();
};
struct BatchnormForwardInfer {  // running statistics
  const ExecContext* ctx = nullptr;
  BatchnormShape sh;
  ConstView x = nullptr;                 // (N, C, H, W)
  const float* gamma = nullptr;          // (C)
  const float* beta = nullptr;           // (C)
  const float* running_mean = nullptr;   // (C)
  const float* running_var = nullptr;    // (C)
  View y = nullptr;                      // (N, C, H, W)
  const float* mean_offset = nullptr;    // (C) or null: see "Mean offset" above
  DType dtype() const { return x.dtype(); }
  static const OpTable<BatchnormForwardInfer>& table();
};
struct BatchnormBackward {  // of the training forward
  const ExecContext* ctx = nullptr;
  BatchnormShape sh;
  ConstView x = nullptr;                 // (N, C, H, W)
  const float* gamma = nullptr;          // (C)
  const float* save_mean = nullptr;      // (C)
  const float* save_inv_std = nullptr;   // (C)
  ConstView dy = nullptr;                // (N, C, H, W)
  View dx = nullptr;                     // (N, C, H, W) or null
  float* dgamma = nullptr;               // (C) or null
  float* dbeta = nullptr;                // (C) or null
  DType dtype() const { return dy.dtype(); }
  static const OpTable<BatchnormBackward>& table();
};

// Rows (registry.cpp): cpu (batchnorm_cpu.cpp), cuda (batchnorm_cuda.cu, device memory,
// ctx.cuda_stream), cudnn (batchnorm_cudnn.cpp: cuDNN's spatial batchnorm, whose momentum,
// variance and saved-statistics conventions are ours). batchnorm_cudnn_supports: non-throwing; eps
// at least cuDNN's minimum and C, H, W within its int sizes (N is checked per call).
// bf16 rows of every entry point here (ops/dispatch.h's contract; x, y, dy, dx stored (N, H, W, C)):
// cpu (batchnorm_bf16_cpu.cpp, the emulation) and cuda (batchnorm_nhwc_bf16.cuh's kernels); cuDNN has
// none, so a bf16 layer runs cuda. f16 rows the same (the kernels instantiated for f16).
bool batchnorm_cudnn_supports(const BatchnormShape& sh);

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
//   sums (2C + 1): [sum_c g] (C), [sum_c g (x - mean)] (C), count N*H*W; g = act'(y) dy (or dy).
// Rows (registry.cpp): cpu (batchnorm_phased_cpu.cpp), cuda (batchnorm_phased_cuda.cu).
struct BatchnormForwardStats {  // this rank's stats
  const ExecContext* ctx = nullptr;
  BatchnormShape sh;
  ConstView x = nullptr;                // (N, C, H, W)
  const float* running_mean = nullptr;  // (C): the shift (minus mean_offset)
  double* stats = nullptr;              // (2C + 1)
  const float* mean_offset = nullptr;   // (C) or null: see "Mean offset" above
  DType dtype() const { return x.dtype(); }
  static const OpTable<BatchnormForwardStats>& table();
};
// From the summed stats: running statistics (unbiased variance over the summed count),
// save_mean/save_inv_std, and y = act(gamma xhat + beta) (act may be null).
struct BatchnormForwardApply {
  const ExecContext* ctx = nullptr;
  BatchnormShape sh;
  const double* stats = nullptr;        // (2C + 1), summed
  ConstView x = nullptr;                // (N, C, H, W)
  const float* gamma = nullptr;         // (C)
  const float* beta = nullptr;          // (C)
  const ActivationParams* act = nullptr;
  View y = nullptr;                     // (N, C, H, W)
  float* running_mean = nullptr;        // (C), updated in place
  float* running_var = nullptr;         // (C), updated in place
  float* save_mean = nullptr;           // (C)
  float* save_inv_std = nullptr;        // (C)
  const float* mean_offset = nullptr;   // (C) or null, as the stats phase's
  DType dtype() const { return x.dtype(); }
  static const OpTable<BatchnormForwardApply>& table();
};
// Inference with a fused activation: y = act(batchnorm_forward_infer(x)).
struct BatchnormForwardInferAct {
  const ExecContext* ctx = nullptr;
  BatchnormShape sh;
  ConstView x = nullptr;                // (N, C, H, W)
  const float* gamma = nullptr;         // (C)
  const float* beta = nullptr;          // (C)
  const float* running_mean = nullptr;  // (C)
  const float* running_var = nullptr;   // (C)
  const ActivationParams* act = nullptr;
  View y = nullptr;                     // (N, C, H, W)
  const float* mean_offset = nullptr;   // (C) or null: see "Mean offset" above
  DType dtype() const { return x.dtype(); }
  static const OpTable<BatchnormForwardInferAct>& table();
};
// This rank's sums, and this rank's dgamma, dbeta (may be null: the gradient reducer sums those).
struct BatchnormBackwardStats {
  const ExecContext* ctx = nullptr;
  BatchnormShape sh;
  ConstView x = nullptr;                // (N, C, H, W)
  ConstView y = nullptr;                // (N, C, H, W): the fused output, read when act is set
  const ActivationParams* act = nullptr;
  const float* save_mean = nullptr;     // (C)
  const float* save_inv_std = nullptr;  // (C)
  ConstView dy = nullptr;               // (N, C, H, W)
  double* sums = nullptr;               // (2C + 1)
  float* dgamma = nullptr;              // (C) or null
  float* dbeta = nullptr;               // (C) or null
  const float* gamma = nullptr;         // (C) or null: with beta, see "A sign-only activation's derivative"
  const float* beta = nullptr;          // (C) or null: the same
  DType dtype() const { return dy.dtype(); }
  static const OpTable<BatchnormBackwardStats>& table();
};
// dx from the summed sums: gamma inv_std (g - sum g / M - (x - mean) inv_std^2 sum g (x - mean) / M).
struct BatchnormBackwardApply {
  const ExecContext* ctx = nullptr;
  BatchnormShape sh;
  const double* sums = nullptr;         // (2C + 1), summed
  ConstView x = nullptr;                // (N, C, H, W)
  ConstView y = nullptr;                // (N, C, H, W), read when act is set
  const ActivationParams* act = nullptr;
  const float* gamma = nullptr;         // (C)
  const float* save_mean = nullptr;     // (C)
  const float* save_inv_std = nullptr;  // (C)
  ConstView dy = nullptr;               // (N, C, H, W)
  View dx = nullptr;                    // (N, C, H, W)
  const float* beta = nullptr;          // (C) or null: see "A sign-only activation's derivative"
  DType dtype() const { return dy.dtype(); }
  static const OpTable<BatchnormBackwardApply>& table();
};

// One rank's phased training in one call each way (a layer without synchronised statistics): the
// stats (sums) phase, then the apply phase, with nothing summed between them, so a row may fuse
// the two. stats (sums) is written as BatchnormForwardStats (BatchnormBackwardStats) writes it;
// every other operand as the apply phase (and, backward, the stats phase: dgamma, dbeta) writes
// it. The cpu and f32 rows run the two phases' rows; the cuda bf16 and f16 rows run one kernel a
// direction where the tensor fits one co-resident grid (batchnorm_nhwc_bf16.cuh), else the two.
struct BatchnormForwardTrainAct {
  const ExecContext* ctx = nullptr;
  BatchnormShape sh;
  ConstView x = nullptr;                // (N, C, H, W)
  const float* gamma = nullptr;         // (C)
  const float* beta = nullptr;          // (C)
  const ActivationParams* act = nullptr;
  View y = nullptr;                     // (N, C, H, W)
  float* running_mean = nullptr;        // (C): the shift, then updated in place
  float* running_var = nullptr;         // (C), updated in place
  float* save_mean = nullptr;           // (C)
  float* save_inv_std = nullptr;        // (C)
  double* stats = nullptr;              // (2C + 1), written
  const float* mean_offset = nullptr;   // (C) or null: see "Mean offset" above
  DType dtype() const { return x.dtype(); }
  static const OpTable<BatchnormForwardTrainAct>& table();
};
struct BatchnormBackwardAct {
  const ExecContext* ctx = nullptr;
  BatchnormShape sh;
  ConstView x = nullptr;                // (N, C, H, W)
  ConstView y = nullptr;                // (N, C, H, W), read when act is set
  const ActivationParams* act = nullptr;
  const float* gamma = nullptr;         // (C)
  const float* save_mean = nullptr;     // (C)
  const float* save_inv_std = nullptr;  // (C)
  ConstView dy = nullptr;               // (N, C, H, W)
  double* sums = nullptr;               // (2C + 1), written
  View dx = nullptr;                    // (N, C, H, W) or null
  float* dgamma = nullptr;              // (C) or null
  float* dbeta = nullptr;               // (C) or null
  const float* beta = nullptr;          // (C) or null: see "A sign-only activation's derivative"
  DType dtype() const { return dy.dtype(); }
  static const OpTable<BatchnormBackwardAct>& table();
};

}  // namespace cnn
