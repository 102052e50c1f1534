// Element-wise sum of several equally shaped tensors (residual connections).
// Backward: every input's gradient equals dy.
#pragma once

#include <cstdint>

#include "core/exec_context.h"
#include "ops/backend.h"

namespace cnn {

// xs: count pointers to (n) -> y (n)
template <typename T>
void add_forward_reference(const ExecContext& ctx, int64_t n, int count, const T* const* xs, T* y);
// dy (n) -> each non-null dxs[i] (n)
template <typename T>
void add_backward_reference(const ExecContext& ctx, int64_t n, int count, const T* dy, T* const* dxs);

void add_forward_cpu(const ExecContext& ctx, int64_t n, int count, const float* const* xs, float* y);
void add_backward_cpu(const ExecContext& ctx, int64_t n, int count, const float* dy, float* const* dxs);

// CUDA: the same operands on device memory, queued on ctx.cuda_stream (<op>_cuda.cu).
void add_forward_cuda(const ExecContext& ctx, int64_t n, int count, const float* const* xs, float* y);
void add_backward_cuda(const ExecContext& ctx, int64_t n, int count, const float* dy, float* const* dxs);

// By backend (ops_dispatch.cpp): the function above of that backend.
void add_forward(Backend backend, const ExecContext& ctx, int64_t n, int count, const float* const* xs, float* y);
void add_backward(Backend backend, const ExecContext& ctx, int64_t n, int count, const float* dy, float* const* dxs);

}  // namespace cnn
