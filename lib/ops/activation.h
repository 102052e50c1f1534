// Pointwise activations: relu, leaky_relu (slope alpha), elu (alpha), sigmoid, tanh.
// The math is written once in activation_math.h (CNN_HD) for the CPU and CUDA.
#pragma once

#include <cstdint>

#include "core/exec_context.h"
#include "ops/dispatch.h"

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

// Entry points (run_op in ops/dispatch.h; rows in registry.cpp). y may alias x, dx may alias dy.
struct ActivationForward {
  const ExecContext* ctx = nullptr;
  ActivationParams p;
  int64_t n = 0;
  ConstView x = nullptr;  // (n)
  View y = nullptr;       // (n)
  DType dtype() const { return x.dtype(); }
  static const OpTable<ActivationForward>& table();
};
struct ActivationBackward {
  const ExecContext* ctx = nullptr;
  ActivationParams p;
  int64_t n = 0;
  ConstView x = nullptr;   // (n); the cpu and cuda rows read x for relu, leaky_relu and elu only,
  ConstView y = nullptr;   // (n); and y for elu, sigmoid and tanh only (the other may be null there)
  ConstView dy = nullptr;  // (n)
  View dx = nullptr;       // (n)
  DType dtype() const { return dy.dtype(); }
  static const OpTable<ActivationBackward>& table();
};
// Backward from the output alone (activation_fusable(p) must hold), for producers that fused the
// activation and kept only y.
struct ActivationBackwardFromOutput {
  const ExecContext* ctx = nullptr;
  ActivationParams p;
  int64_t n = 0;
  ConstView y = nullptr;   // (n)
  ConstView dy = nullptr;  // (n)
  View dx = nullptr;       // (n)
  DType dtype() const { return dy.dtype(); }
  static const OpTable<ActivationBackwardFromOutput>& table();
};

// A producer's per-channel bias and the activation fused into it, in one pass over its output:
// y = act(y + b[c]) in place over an (outer, channels, inner) tensor (NCHW: N, C, H * W), or y =
// act(y) where b is null. FP32 rows (cpu, cuda); the sum is rounded once, then the activation, as
// a bias add followed by the activation layer.
struct BiasActivationForward {
  const ExecContext* ctx = nullptr;
  ActivationParams p;
  int64_t outer = 0, channels = 0, inner = 0;
  ConstView b = nullptr;  // (channels) or null
  View y = nullptr;       // (outer, channels, inner)
  DType dtype() const { return y.dtype(); }
  static const OpTable<BiasActivationForward>& table();
};
// Throws unless outer, channels and inner are non-negative (every row's first check).
void check_bias_activation(const BiasActivationForward& a);

// Rows (registry.cpp): cpu (activation_cpu.cpp), cuda (activation_cuda.cu: the same operands on device
// memory, queued on ctx.cuda_stream), cudnn (activation_cudnn.cpp: relu, sigmoid, tanh, and elu
// with alpha = 1 through cudnnActivation*, since cuDNN's elu derivative drops alpha; supports is
// non-throwing and says which, the others throw).
bool activation_cudnn_supports(const ActivationParams& p);

}  // namespace cnn
