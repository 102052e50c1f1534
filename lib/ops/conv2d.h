// 2-D convolution (cross-correlation, as in PyTorch) with stride, padding, dilation and groups.
// Three entry points, one per direction (Conv2dForward, Conv2dBackwardData, Conv2dBackwardFilter),
// run through the dispatcher (run_op in ops/dispatch.h, with conv2d_algo.h included); their rows
// are the ConvAlgo implementations of conv2d_algo.h: the backends' defaults and every named
// algorithm. Below them:
//   *_reference  naive loops, templated for float and double: the oracle (conv2d_cpu.cpp)
//   *_cpu        im2col + OpenBLAS SGEMM, OpenMP-threaded (conv2d_cpu.cpp): the cpu:im2col_gemm rows
//   *_cpu_direct direct loops for one-input-channel filters (conv2d_direct_cpu.cpp): the cpu:direct
//                rows; the "cpu" default rows take it for depthwise shapes, im2col elsewhere
//   *_bf16_cpu   the same on widened bf16 activations, outputs rounded once: the cpu bf16 rows
//   *_cuda*      our CUDA kernels (conv2d_cuda.cu), *_cudnn cuDNN (conv2d_cudnn.cpp): the rows of
//                conv2d_algo_cuda.cpp and conv2d_cudnn.cpp
// Backward writes (never accumulates) dx, dw, db; any of them may be null when not needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/bf16.h"
#include "core/exec_context.h"
#include "core/math_mode.h"
#include "ops/dispatch.h"
#include "ops/packed_weights.h"

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
// db[k] = sum over n, p, q of dy (N, K, P, Q), in a fixed order (rows in 8 lanes, double across
// images): the bias gradient of both CPU paths. Does not throw.
float conv2d_bias_gradient_cpu(const Conv2dShape& sh, const float* dy, int64_t k);
// Direct CPU convolution (conv2d_direct_cpu.cpp), the "cpu:direct" rows: filters that read one
// input channel (C/groups == 1: depthwise with any channel multiplier, C == 1 first layers), any
// stride, padding and dilation; no workspace. The "cpu" default rows take it where
// conv2d_cpu_direct_is_default (depthwise: groups > 1), Winograd (below) or im2col + SGEMM elsewhere.
bool conv2d_cpu_direct_can_implement(const Conv2dShape& sh);
bool conv2d_cpu_direct_is_default(const Conv2dShape& sh);
void conv2d_forward_cpu_direct(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                               const float* b, float* y);
void conv2d_backward_cpu_direct(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                const float* dy, float* dx, float* dw, float* db);
// Winograd F(2x2, 3x3) on the CPU (conv2d_winograd_cpu.cpp), the "cpu:winograd" rows: 3x3, stride 1,
// dilation 1, groups 1, padding <= 2 (backward_data runs it with padding 2 - pad). Forward, dx and
// dw by Winograd (dw by its transpose, F(3x3, 2x2)), db by the im2col path's column sums.
// Workspace: conv2d_cpu_winograd_workspace_bytes (of the data convolution when `data`), and
// conv2d_cpu_winograd_filter_workspace_bytes for dw. The "cpu" default rows take it where
// conv2d_cpu_winograd_is_default (C and K >= 16, padding <= 1, P and Q >= 8, and enough 4x4 tiles
// a call: 100, or 512 where the tiles overhang the output by more than 15%).
bool conv2d_cpu_winograd_can_implement(const Conv2dShape& sh);
bool conv2d_cpu_winograd_is_default(const Conv2dShape& sh);
size_t conv2d_cpu_winograd_workspace_bytes(const ExecContext& ctx, const Conv2dShape& sh, bool data);
size_t conv2d_cpu_winograd_filter_workspace_bytes(const ExecContext& ctx, const Conv2dShape& sh);
void conv2d_forward_cpu_winograd(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                 const float* b, float* y);
void conv2d_backward_cpu_winograd(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                  const float* dy, float* dx, float* dw, float* db);
// BF16 and F16 emulation (T = bf16 or f16), the cpu rows of dtype bf16 and f16 (conv2d_cpu.cpp) and
// the oracle of the cuda bf16 and f16 rows: x, y, dy, dx of dtype T channels-last ((N, H, W, C),
// (N, P, Q, K)); w, b, dw, db FP32. The rounding points of the GPU rows: the FP32 master weights
// rounded to T's values (the GPU rows pack them into T copies), x and dy widened exactly, the f32
// cpu convolution above, then y and dx rounded once; dw and db stay FP32 (never rounded).
template <typename T>
void conv2d_forward_emulated_cpu(const ExecContext& ctx, const Conv2dShape& sh, const T* x, const float* w,
                                 const float* b, T* y);
template <typename T>
void conv2d_backward_emulated_cpu(const ExecContext& ctx, const Conv2dShape& sh, const T* x, const float* w,
                                  const T* dy, T* dx, float* dw, float* db);
// T = float is the f32cl rows (the oracle's layout check of the cuda f32cl rows): x, y, dy, dx FP32
// channels-last, the masters unrounded, so the values are the f32 row's bit for bit.

// Entry points (run_op; rows: conv2d_algo.h). A named algorithm is run with
// run_op(algo.backend, args, algo.name).
struct ConvAlgo;
struct Conv2dForward {
  const ExecContext* ctx = nullptr;
  Conv2dShape sh;
  ConstView x = nullptr;  // (N, C, H, W)
  ConstView w = nullptr;  // (K, C/groups, R, S)
  ConstView b = nullptr;  // (K) or null
  View y = nullptr;       // (N, K, P, Q)
  MathMode math = MathMode::fp32;  // tf32: rows that honour it (cuDNN) may use TF32 tensor cores
  PackedWeights16 w16{};  // bf16/f16 rows: w prepacked in the row's packed_layout, or none (packed per call)
  DType dtype() const { return x.dtype(); }
  static const ImplTable<ConvAlgo>& table();
};
struct Conv2dBackwardData {
  const ExecContext* ctx = nullptr;
  Conv2dShape sh;
  ConstView w = nullptr;   // (K, C/groups, R, S)
  ConstView dy = nullptr;  // (N, K, P, Q)
  View dx = nullptr;       // (N, C, H, W)
  MathMode math = MathMode::fp32;
  PackedWeights16 w16{};  // as Conv2dForward's
  DType dtype() const { return dy.dtype(); }
  static const ImplTable<ConvAlgo>& table();
};
struct Conv2dBackwardFilter {
  const ExecContext* ctx = nullptr;
  Conv2dShape sh;
  ConstView x = nullptr;   // (N, C, H, W)
  ConstView dy = nullptr;  // (N, K, P, Q)
  View dw = nullptr;       // (K, C/groups, R, S)
  View db = nullptr;       // (K) or null
  MathMode math = MathMode::fp32;
  DType dtype() const { return dy.dtype(); }
  static const ImplTable<ConvAlgo>& table();
};

// CUDA: the same operands on device memory, queued on ctx.cuda_stream: the "cuda" default rows,
// which take the direct kernels where conv2d_cuda_direct_is_default (filters reading one input
// channel, at most 25 taps) and the implicit GEMM elsewhere.
bool conv2d_cuda_direct_is_default(const Conv2dShape& sh);
void conv2d_forward_cuda(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                        const float* b, float* y);
void conv2d_backward_cuda(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                         const float* dy, float* dx, float* dw, float* db);

// cuDNN: FP32 with FMA math (no TF32) for MathMode::fp32, cuDNN's default math (TF32 tensor cores
// allowed) for MathMode::tf32 (conv2d_cudnn.cpp, whose rows are its algorithms by name and the
// "cudnn" defaults: the heuristic's first choice within ctx.workspace_limit_bytes, deterministic
// ones when ctx.deterministic); the same rows in dtype bf16 run cuDNN on bf16 NHWC activations
// (conv2d_cudnn.cpp says how). supports: non-throwing; the sizes fit cuDNN's int API (whether an
// algorithm exists for the shape is the library's answer at run time).
bool conv2d_cudnn_supports(const Conv2dShape& sh);

// ---- strategies of conv2d_cuda (conv2d_cuda.cu), the rows cuda:implicit_gemm and cuda:direct ----
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
// db[k] = sum of dy (N, K, P, Q) over n, p, q in a fixed order (the cuda rows' bias gradient; the
// cuDNN FP32/TF32 rows use it too: cudnnConvolutionBackwardBias ran at a quarter of the memory
// bandwidth on the H200). parts: conv2d_cuda_bias_gradient_workspace_bytes of device scratch (null
// when that is 0). can_implement: K <= 65535 and N*K*P*Q < 2^30.
bool conv2d_cuda_bias_gradient_can_implement(const Conv2dShape& sh);
size_t conv2d_cuda_bias_gradient_workspace_bytes(const Conv2dShape& sh);
void conv2d_cuda_bias_gradient(const ExecContext& ctx, const Conv2dShape& sh, const float* dy, float* db,
                               float* parts);
void conv2d_forward_cuda_implicit_gemm(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                       const float* b, float* y);
void conv2d_backward_cuda_implicit_gemm(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                        const float* dy, float* dx, float* dw, float* db);
void conv2d_forward_cuda_direct(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                const float* b, float* y);
void conv2d_backward_cuda_direct(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                 const float* dy, float* dx, float* dw, float* db);

}  // namespace cnn
