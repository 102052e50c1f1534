// Concatenation along channels of NCHW tensors with equal N, H, W (inception blocks).
#pragma once

#include <cstdint>
#include <vector>

#include "core/exec_context.h"
#include "ops/backend.h"

namespace cnn {

struct ConcatShape {
  int64_t N = 0;
  int64_t HW = 1;                   // H * W, shared by all inputs
  std::vector<int64_t> channels;    // C of each input; the output has their sum
  int64_t total_channels() const;
};

// xs[i] (N, channels[i], HW) -> y (N, sum channels, HW)
template <typename T>
void concat_forward_reference(const ExecContext& ctx, const ConcatShape& sh, const T* const* xs, T* y);
// dy (N, sum channels, HW) -> each non-null dxs[i] (N, channels[i], HW)
template <typename T>
void concat_backward_reference(const ExecContext& ctx, const ConcatShape& sh, const T* dy, T* const* dxs);

void concat_forward_cpu(const ExecContext& ctx, const ConcatShape& sh, const float* const* xs, float* y);
void concat_backward_cpu(const ExecContext& ctx, const ConcatShape& sh, const float* dy, float* const* dxs);

// CUDA: the same operands on device memory, queued on ctx.cuda_stream (<op>_cuda.cu).
void concat_forward_cuda(const ExecContext& ctx, const ConcatShape& sh, const float* const* xs, float* y);
void concat_backward_cuda(const ExecContext& ctx, const ConcatShape& sh, const float* dy, float* const* dxs);

// By backend (ops_dispatch.cpp): the function above of that backend.
void concat_forward(Backend backend, const ExecContext& ctx, const ConcatShape& sh, const float* const* xs, float* y);
void concat_backward(Backend backend, const ExecContext& ctx, const ConcatShape& sh, const float* dy,
                     float* const* dxs);

}  // namespace cnn
