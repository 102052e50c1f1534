// Fully connected layer y = x w^T + b, weights in PyTorch layout (K, C).
//   *_reference naive loops (float and double), *_cpu OpenBLAS SGEMM (dense_cpu.cpp).
// Backward writes (never accumulates) dx, dw, db; any may be null.
#pragma once

#include <cstdint>

#include "core/exec_context.h"
#include "ops/backend.h"

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

void dense_forward_cpu(const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w, const float* b,
                       float* y);
void dense_backward_cpu(const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w,
                        const float* dy, float* dx, float* dw, float* db);

// CUDA: the same operands on device memory, queued on ctx.cuda_stream (<op>_cuda.cu).
void dense_forward_cuda(const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w, const float* b,
                       float* y);
void dense_backward_cuda(const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w,
                        const float* dy, float* dx, float* dw, float* db);

// By backend (ops_dispatch.cpp): the function above of that backend.
void dense_forward(Backend backend, const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w,
                   const float* b, float* y);
void dense_backward(Backend backend, const ExecContext& ctx, const DenseShape& sh, const float* x, const float* w,
                    const float* dy, float* dx, float* dw, float* db);

}  // namespace cnn
