// 2-D convolution (cross-correlation, as in PyTorch) with stride, padding, dilation and groups.
// Every backend takes identical parameters so tests can loop over them:
//   *_reference  naive loops, templated for float and double: the oracle (conv2d_cpu.cpp)
//   *_cpu        im2col + OpenBLAS SGEMM, OpenMP-threaded (conv2d_cpu.cpp)
// Backward writes (never accumulates) dx, dw, db; any of them may be null when not needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/exec_context.h"
#include "ops/backend.h"

namespace cnn {

struct Conv2dShape {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input
  int64_t K = 0, R = 0, S = 0;         // filters: K outputs, R x S window
  int64_t P = 0, Q = 0;                // output height, width
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
  bool has_bias = true;

  // Fills P and Q; throws cnn::Error naming the problem when the shape is impossible
  // (channels not divisible by groups, output smaller than 1, non-positive sizes), when stride,
  // padding, dilation or groups do not fit an int, or when x, w or y would be over the per-tensor
  // cap (core/checked.h). Every product of sizes of one operand is then within int64_t (and int32).
  static Conv2dShape make(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S,
                          int64_t stride_h = 1, int64_t stride_w = 1, int64_t pad_h = 0, int64_t pad_w = 0,
                          int64_t dilation_h = 1, int64_t dilation_w = 1, int64_t groups = 1, bool has_bias = true);
  int64_t weight_numel() const { return K * (C / groups) * R * S; }
  // Multiply-adds counted as 2 FLOPs; bias adds ignored.
  double flops_forward() const { return 2.0 * N * K * P * Q * (C / groups) * R * S; }
  std::string to_string() const;
};

// x (N, C, H, W), w (K, C/groups, R, S), b (K) or null, y (N, K, P, Q)
template <typename T>
void conv2d_forward_reference(const ExecContext& ctx, const Conv2dShape& sh, const T* x, const T* w, const T* b,
                              T* y);
// dy (N, K, P, Q) -> dx (N, C, H, W), dw (K, C/groups, R, S), db (K); each may be null.
template <typename T>
void conv2d_backward_reference(const ExecContext& ctx, const Conv2dShape& sh, const T* x, const T* w, const T* dy,
                               T* dx, T* dw, T* db);

void conv2d_forward_cpu(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                        const float* b, float* y);
void conv2d_backward_cpu(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                         const float* dy, float* dx, float* dw, float* db);

// CUDA: the same operands on device memory, queued on ctx.cuda_stream (<op>_cuda.cu).
void conv2d_forward_cuda(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                        const float* b, float* y);
void conv2d_backward_cuda(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                         const float* dy, float* dx, float* dw, float* db);

// cuDNN: the same operands through cuDNN's convolution API, FP32 without TF32, with the algorithm
// cuDNN's heuristic ranks first within ctx.workspace_limit_bytes (deterministic ones when
// ctx.deterministic); every algorithm by name is in conv2d_cudnn_algos() (conv2d_cudnn.cpp).
// supports: non-throwing; the sizes fit cuDNN's int API (whether an algorithm exists for the shape
// is the library's answer at run time).
bool conv2d_cudnn_supports(const Conv2dShape& sh);
void conv2d_forward_cudnn(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                          const float* b, float* y);
void conv2d_backward_cudnn(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                           const float* dy, float* dx, float* dw, float* db);

// By backend (ops_dispatch.cpp): the function above of that backend.
void conv2d_forward(Backend backend, const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                    const float* b, float* y);
void conv2d_backward(Backend backend, const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                     const float* dy, float* dx, float* dw, float* db);

// ---- strategies of conv2d_cuda (conv2d_cuda.cu) ----
// conv2d_forward_cuda / conv2d_backward_cuda pick one per shape (direct where it can implement,
// else implicit GEMM); tests and the autotuner call them directly, after asking can_implement.
// Same operands and contract as conv2d_forward_cuda / conv2d_backward_cuda; a strategy that cannot
// implement the shape throws.
//   implicit_gemm  tiled FP32 GEMM over gathered operands, any shape whose tensors have < 2^30 elements
//   direct         one thread per output (input) pixel; filters that read one input channel
//                  (C/groups == 1: depthwise, C == 1 first layers), R*S <= 25
bool conv2d_cuda_implicit_gemm_can_implement(const Conv2dShape& sh);
bool conv2d_cuda_direct_can_implement(const Conv2dShape& sh);
// Bytes of ctx.workspace one backward call takes (split partial sums of dw and db; dx takes none)
// when dw / db are requested, and one forward call (split partial sums of y; direct: none).
size_t conv2d_cuda_implicit_gemm_workspace_bytes(const Conv2dShape& sh, bool dw, bool db);
size_t conv2d_cuda_implicit_gemm_forward_workspace_bytes(const Conv2dShape& sh);
size_t conv2d_cuda_direct_workspace_bytes(const Conv2dShape& sh, bool dw, bool db);
void conv2d_forward_cuda_implicit_gemm(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                       const float* b, float* y);
void conv2d_backward_cuda_implicit_gemm(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                        const float* dy, float* dx, float* dw, float* db);
void conv2d_forward_cuda_direct(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                const float* b, float* y);
void conv2d_backward_cuda_direct(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                 const float* dy, float* dx, float* dw, float* db);

}  // namespace cnn
