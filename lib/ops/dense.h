// Fully connected layer y = x w^T + b, weights in PyTorch layout (K, C).
//   *_reference naive loops (float and double), *_cpu OpenBLAS SGEMM (dense_cpu.cpp).
// Backward writes (never accumulates) dx, dw, db; any may be null.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/bf16.h"
#include "core/exec_context.h"
#include "core/math_mode.h"
#include "ops/column_sum_bf16.h"
#include "ops/dispatch.h"
#include "ops/packed_weights.h"

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
  // The cuda bf16/f16 rows: w prepacked (packed_weights.h: that dtype, layout kcrs, i.e. (K, C)), or
  // none (the row casts its own into ctx.workspace). Other rows ignore it.
  PackedWeights16 w16{};
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
  PackedWeights16 w16{};  // as DenseForward's (read for dx)
  DType dtype() const { return dy.dtype(); }
  static const OpTable<DenseBackward>& table();
};

// Rows (registry.cpp): cpu (dense_cpu.cpp, OpenBLAS SGEMM, FP32 whatever the math), cuda
// (dense_cuda.cu, cuBLAS on ctx.cuda_stream, device memory: pedantic FP32 math for fp32,
// CUBLAS_TF32_TENSOR_OP_MATH for tf32; the bias sum db stays an FP32 kernel in both).
// BF16 rows (ops/dispatch.h's contract; x, y, dy, dx bf16, rank 2 so no layout change; w, b FP32
// masters; dw, db FP32; the call's math is ignored: BF16 products, FP32 sums):
//   cuda  casts w into a bf16 copy in ctx.workspace (or reads the prepacked w16), then cublasGemmEx on BF16 tensor cores with
//         CUBLAS_COMPUTE_32F: forward writes x w^T in FP32 into the workspace and one kernel adds
//         b (FP32) and rounds y once, with core/bf16.h's rounding (with or without a bias); dx = dy w
//         in bf16 straight from cuBLAS (rounded once from its FP32 sums); dw = dy^T x with an FP32
//         output matrix; db a deterministic FP32 column sum of dy (column_sum_bf16.h).
//         Workspace: dense_bf16_workspace_bytes. (Not a cublasLt bias epilogue: the FP32 pass
//         costs N*K*8 bytes, small next to the GEMM's operands, and the rounding stays ours.)
//   cpu   the emulation the cuda row is tested against: x, dy widened, w rounded to bf16 values
//         (round_to_bf16, as the cuda row's cast), the f32 row's SGEMMs, y and dx rounded once.
// F16 rows: the same with f16 (cuda: CUDA_R_16F operands, the same workspace; an f16 copy of w
// is inf where |w| > 65504).

// The bf16 copy of w at the front of the cuda bf16 row's workspace: K*C*2 bytes padded to 256.
inline size_t dense_bf16_weights_bytes(const DenseShape& sh) {
  return (size_t(sh.K * sh.C) * sizeof(bf16) + 255) / 256 * 256;
}
// Bytes of ctx.workspace one call of the cuda bf16 row takes, forward or backward (the larger):
// the bf16 copy of w, then forward's FP32 y (N*K*4) or backward's column-sum partials
// (column_sum_bf16_scratch_bytes(N, K)). The cpu rows take none.
inline size_t dense_bf16_workspace_bytes(const DenseShape& sh) {
  return dense_bf16_weights_bytes(sh) +
         std::max(size_t(sh.N * sh.K) * sizeof(float), column_sum_bf16_scratch_bytes(sh.N, sh.K));
}

}  // namespace cnn
