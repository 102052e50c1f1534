// The CUDA kernels around cuDNN's BF16 and F16 convolutions (the bf16 and f16 rows of
// conv2d_cudnn.cpp; each function has an overload per type): the bias
// broadcast that forward blends onto (cuDNN's legacy API has no FP32 bias for BF16 data), and the
// filter gradient from cuDNN's BF16 (K, R, S, C/groups) into the FP32 (K, C/groups, R, S) master
// gradient. The weights' packing is conv2d_weights_bf16.h's; db is column_sum_bf16.h's.
// Trap: the bias is rounded to bf16 here, as cuDNN reads it in y's dtype; the sum with the
// convolution is then rounded once by cuDNN (forward runs with beta = 1 over this y).
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/exec_context.h"
#include "ops/conv2d.h"

namespace cnn {

// y (pixels, K) bf16 (f16) = b[k] rounded to bf16 (f16), for every pixel. b (K) FP32.
void conv2d_cudnn_fill_bias_cuda(const ExecContext& ctx, int64_t pixels, int64_t K, const float* b, bf16* y);
void conv2d_cudnn_fill_bias_cuda(const ExecContext& ctx, int64_t pixels, int64_t K, const float* b, f16* y);

// dw16 (K, R, S, C/groups) bf16 (f16) -> dw (K, C/groups, R, S) FP32 (exact: a widening and a permute).
void conv2d_cudnn_unpack_dw_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* dw16, float* dw);
void conv2d_cudnn_unpack_dw_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* dw16, float* dw);

}  // namespace cnn
