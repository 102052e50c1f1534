// Max and average pooling over R x S windows (global average pooling is R=H, S=W).
// Max backward recomputes the argmax from x and y (the first position in window order whose
// value equals y), so no index mask is stored and every backend takes the same operands.
// Average pooling divides by the window area clipped to the input (padding not counted).
#pragma once

#include <cstdint>
#include <string>

#include "core/exec_context.h"
#include "ops/backend.h"

namespace cnn {

enum class PoolKind { max, avg };

struct Pool2dShape {
  PoolKind kind = PoolKind::max;
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t R = 0, S = 0;  // window
  int64_t P = 0, Q = 0;  // output
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;

  // Fills P, Q (floor mode); throws cnn::Error when the window does not fit, when stride or
  // padding do not fit an int, or when the input or output is over the per-tensor cap
  // (core/checked.h).
  static Pool2dShape make(PoolKind kind, int64_t N, int64_t C, int64_t H, int64_t W, int64_t R, int64_t S,
                          int64_t stride_h, int64_t stride_w, int64_t pad_h = 0, int64_t pad_w = 0);
  double flops_forward() const { return 1.0 * N * C * P * Q * R * S; }
  std::string to_string() const;
};

// x (N, C, H, W) -> y (N, C, P, Q)
template <typename T>
void pool2d_forward_reference(const ExecContext& ctx, const Pool2dShape& sh, const T* x, T* y);
// x, y as in forward, dy (N, C, P, Q) -> dx (N, C, H, W) (written, not accumulated)
template <typename T>
void pool2d_backward_reference(const ExecContext& ctx, const Pool2dShape& sh, const T* x, const T* y, const T* dy,
                               T* dx);

void pool2d_forward_cpu(const ExecContext& ctx, const Pool2dShape& sh, const float* x, float* y);
void pool2d_backward_cpu(const ExecContext& ctx, const Pool2dShape& sh, const float* x, const float* y,
                         const float* dy, float* dx);

// CUDA: the same operands on device memory, queued on ctx.cuda_stream (<op>_cuda.cu).
void pool2d_forward_cuda(const ExecContext& ctx, const Pool2dShape& sh, const float* x, float* y);
void pool2d_backward_cuda(const ExecContext& ctx, const Pool2dShape& sh, const float* x, const float* y,
                         const float* dy, float* dx);

// cuDNN: the same operands through cudnnPooling* (pool2d_cudnn.cpp). supports: non-throwing; every
// shape Pool2dShape::make accepts whose sizes fit cuDNN's int API.
bool pool2d_cudnn_supports(const Pool2dShape& sh);
void pool2d_forward_cudnn(const ExecContext& ctx, const Pool2dShape& sh, const float* x, float* y);
void pool2d_backward_cudnn(const ExecContext& ctx, const Pool2dShape& sh, const float* x, const float* y,
                           const float* dy, float* dx);

// By backend (ops_dispatch.cpp): the function above of that backend.
void pool2d_forward(Backend backend, const ExecContext& ctx, const Pool2dShape& sh, const float* x, float* y);
void pool2d_backward(Backend backend, const ExecContext& ctx, const Pool2dShape& sh, const float* x, const float* y,
                     const float* dy, float* dx);

}  // namespace cnn
