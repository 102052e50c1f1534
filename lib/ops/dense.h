// Fully connected layer y = x w^T + b, weights in PyTorch layout (K, C).
//   *_reference naive loops (float and double), *_cpu OpenBLAS SGEMM (dense_cpu.cpp).
// Backward writes (never accumulates) dx, dw, db; any may be null.
#pragma once

#include <cstdint>

#include "core/exec_context.h"
#include "core/math_mode.h"
#include "ops/dispatch.h"

namespace cnn {

struct DenseShape {
  int64_t N = 0;  // batch
  int64_t C = 0;  // input features
  int64_t K = 0;  // output features
  bool has_bias = true;
  double flops_forward() const { return 2.0 * N * C * K; }
};

// x (N, C), w (K, C), b (K) or null, y (N, K)
template <typename T>
void dense_forward_reference(const ExecContext& ctx, const DenseShape& sh, const T* x, const T* w, const T* b, T* y);
// dy (N, K) -> dx (N, C), dw (K, C), db (K)
template <typename T>
void dense_backward_reference(const ExecContext& ctx, const DenseShape& sh, const T* x, const T* w, const T* dy,
                              T* dx, T* dw, T* db);

// Entry points (run_op in ops/dispatch.h; rows in registry.cpp).
struct DenseForward {
  const ExecContext* ctx = nullptr;
  DenseShape sh;
  ConstView x = nullptr;  // (N, C)
  ConstView w = nullptr;  // (K, C)
  ConstView b = nullptr;  // (K) or null
  View y = nullptr;       // (N, K)
  MathMode math = MathMode::fp32;  // tf32: the cuda row's GEMM may use TF32 tensor cores
  DType dtype() const { return x.dtype(); }
  static const OpTable<DenseForward>& table();
};
struct DenseBackward {
  const ExecContext* ctx = nullptr;
  DenseShape sh;
  ConstView x = nullptr;   // (N, C)
  ConstView w = nullptr;   // (K, C)
  ConstView dy = nullptr;  // (N, K)
  View dx = nullptr;       // (N, C) or null
  View dw = nullptr;       // (K, C) or null
  View db = nullptr;       // (K) or null
  MathMode math = MathMode::fp32;
  DType dtype() const { return dy.dtype(); }
  static const OpTable<DenseBackward>& table();
};

// Rows (registry.cpp): cpu (dense_cpu.cpp, OpenBLAS SGEMM, FP32 whatever the math), cuda
// (dense_cuda.cu, cuBLAS on ctx.cuda_stream, device memory: pedantic FP32 math for fp32,
// CUBLAS_TF32_TENSOR_OP_MATH for tf32; the bias sum db stays an FP32 kernel in both).

}  // namespace cnn
