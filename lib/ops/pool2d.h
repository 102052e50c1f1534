// Max and average pooling over R x S windows (global average pooling is R=H, S=W).
// Max backward recomputes the argmax from x and y (the first position in window order whose
// value equals y), so no index mask is stored and every backend takes the same operands.
// Average pooling divides by the window area clipped to the input (padding not counted).
#pragma once

#include <cstdint>
#include <string>

#include "core/exec_context.h"
#include "ops/dispatch.h"

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

// Entry points (run_op in ops/dispatch.h; rows in registry.cpp).
struct Pool2dForward {
  const ExecContext* ctx = nullptr;
  Pool2dShape sh;
  ConstView x = nullptr;  // (N, C, H, W)
  View y = nullptr;       // (N, C, P, Q)
  DType dtype() const { return x.dtype(); }
  static const OpTable<Pool2dForward>& table();
};
struct Pool2dBackward {
  const ExecContext* ctx = nullptr;
  Pool2dShape sh;
  ConstView x = nullptr;   // (N, C, H, W), as in forward
  ConstView y = nullptr;   // (N, C, P, Q), as in forward
  ConstView dy = nullptr;  // (N, C, P, Q)
  View dx = nullptr;       // (N, C, H, W), written (not accumulated)
  DType dtype() const { return dy.dtype(); }
  static const OpTable<Pool2dBackward>& table();
};

// Rows (registry.cpp): cpu (pool2d_cpu.cpp), cuda (pool2d_cuda.cu, device memory, ctx.cuda_stream),
// cudnn (pool2d_cudnn.cpp, cudnnPooling*). pool2d_cudnn_supports: non-throwing; every shape
// Pool2dShape::make accepts whose sizes fit cuDNN's int API.
bool pool2d_cudnn_supports(const Pool2dShape& sh);

// The max backward kernels of the cuda rows (pool2d_cuda.cu, pool2d_nhwc_bf16_cuda.cu): `automatic`
// runs the streaming kernel where windows do not overlap (stride = window, no padding), else the
// tiled one where its shared memory fits, else the gather; `tiled` never runs the streaming kernel;
// `gather` always runs the gather. CNN_POOL_BACKWARD (auto, tiled, gather) picks one for a process.
enum class MaxPoolBackwardKernel { automatic, tiled, gather };
// The f32 NCHW cuda row with the max backward kernel given (tests and benchmarks time and check each);
// pool2d_backward_cuda is this with CNN_POOL_BACKWARD's kernel. Average pooling ignores `kernel`.
void pool2d_backward_cuda_f32_with(const Pool2dBackward& a, MaxPoolBackwardKernel kernel);

}  // namespace cnn
