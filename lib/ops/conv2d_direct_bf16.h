// Direct BF16 convolutions for filters that read one input channel (C / groups == 1): depthwise
// layers (with a channel multiplier K / C) and C == 1 first layers, where an implicit GEMM would
// waste most of each tensor-core step. BF16 in and out like conv2d_igemm_bf16.h: x, w, dy, y, dx
// bf16; bias, dw, db FP32; FP32 sums, each output rounded once (core/bf16.h).
//   forward          one thread per output element, the window's taps in a loop
//   backward_data    one thread per input element, over the output channels of its group
//   backward_filter  one block per channel (3x3: all taps in one pass over dy; else per tap) and
//                    slice of the N*P*Q positions, block sums in a fixed order; db is one more
//                    tap whose input is 1; slices add up in order
// Trap: no atomics: results do not depend on scheduling. A call may take ctx.workspace (the
// slices' partial sums of dw and db): conv2d_direct_bf16_workspace_bytes says how much.
#pragma once

#include <cstddef>

#include "core/bf16.h"
#include "ops/conv2d.h"

namespace cnn {

// Non-throwing: C / groups == 1 and every tensor below 2^31 elements.
bool conv2d_direct_bf16_can_implement(const Conv2dShape& sh);
// Slices of the N*P*Q positions a backward-filter call sums separately (at least 4096 positions a
// slice, about 1024 / K slices at most), and the bytes of ctx.workspace it takes for their partial sums
// (forward and backward data take none).
int conv2d_direct_bf16_filter_slices(const Conv2dShape& sh);
size_t conv2d_direct_bf16_workspace_bytes(const Conv2dShape& sh);

// x (N, C, H, W), w (K, 1, R, S), b (K) or null -> y (N, K, P, Q)
void conv2d_forward_direct_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x, const bf16* w,
                                     const float* b, bf16* y);
// w (K, 1, R, S), dy (N, K, P, Q) -> dx (N, C, H, W)
void conv2d_backward_data_direct_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* w,
                                           const bf16* dy, bf16* dx);
// x (N, C, H, W), dy (N, K, P, Q) -> dw (K, 1, R, S) or null, db (K) or null
void conv2d_backward_filter_direct_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x,
                                             const bf16* dy, float* dw, float* db);

}  // namespace cnn
