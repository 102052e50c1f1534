// Pointwise activations: relu, leaky_relu (slope alpha), elu (alpha), sigmoid, tanh.
// The math is written once in activation_math.h (CNN_HD) for the CPU and CUDA.
#pragma once

#include <cstdint>

#include "core/exec_context.h"
#include "ops/backend.h"

namespace cnn {

enum class ActivationKind { relu, leaky_relu, elu, sigmoid, tanh };

struct ActivationParams {
  ActivationKind kind = ActivationKind::relu;
  float alpha = 0.01f;  // leaky_relu negative slope, elu alpha
};

const char* to_string(ActivationKind k);

// Whether the derivative can be taken from the output y alone (activation_backward_from_output in
// activation_math.h), so a producer may fuse the activation into its own kernels: every kind but
// leaky_relu and elu with alpha <= 0, whose sign of x cannot be read off y.
inline bool activation_fusable(const ActivationParams& p) {
  return (p.kind != ActivationKind::leaky_relu && p.kind != ActivationKind::elu) || p.alpha > 0.0f;
}

// x (n) -> y (n); y may alias x.
template <typename T>
void activation_forward_reference(const ExecContext& ctx, const ActivationParams& p, int64_t n, const T* x, T* y);
// x, y from forward, dy (n) -> dx (n); dx may alias dy.
template <typename T>
void activation_backward_reference(const ExecContext& ctx, const ActivationParams& p, int64_t n, const T* x,
                                   const T* y, const T* dy, T* dx);

void activation_forward_cpu(const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x, float* y);
void activation_backward_cpu(const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x,
                             const float* y, const float* dy, float* dx);

// CUDA: the same operands on device memory, queued on ctx.cuda_stream (<op>_cuda.cu).
void activation_forward_cuda(const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x, float* y);
void activation_backward_cuda(const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x,
                             const float* y, const float* dy, float* dx);

// Backward from the output alone (activation_fusable(p) must hold): y, dy (n) -> dx (n); dx may
// alias dy. For producers that fused the activation and kept only y.
void activation_backward_from_output_cpu(const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* y,
                                         const float* dy, float* dx);
void activation_backward_from_output_cuda(const ExecContext& ctx, const ActivationParams& p, int64_t n,
                                          const float* y, const float* dy, float* dx);

// cuDNN: relu, sigmoid, tanh, and elu with alpha = 1 through cudnnActivation* (activation_cudnn.cpp;
// cuDNN's elu derivative drops alpha);
// supports (non-throwing) says which; the others throw. Same aliasing rules.
bool activation_cudnn_supports(const ActivationParams& p);
void activation_forward_cudnn(const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x, float* y);
void activation_backward_cudnn(const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x,
                               const float* y, const float* dy, float* dx);

// By backend (ops_dispatch.cpp): the function above of that backend.
void activation_forward(Backend backend, const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x,
                        float* y);
void activation_backward(Backend backend, const ExecContext& ctx, const ActivationParams& p, int64_t n, const float* x,
                         const float* y, const float* dy, float* dx);
void activation_backward_from_output(Backend backend, const ExecContext& ctx, const ActivationParams& p, int64_t n,
                                     const float* y, const float* dy, float* dx);

}  // namespace cnn
