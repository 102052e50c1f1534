// Direct BF16 convolutions over NHWC tensors for filters that read one input channel
// (C / groups == 1): depthwise layers (channel multiplier K / C, any R x S window, stride, padding,
// dilation) and C == 1 first layers (whose input is the same in NCHW and NHWC), where an implicit
// GEMM would waste most of each tensor-core step. BF16 activations in and out, FP32 sums, each
// output rounded once (core/bf16.h); bias, dw and db FP32.
//   forward          rows (3x3 windows, stride_w and dilation_w 1, 8-byte aligned tensors, 4
//                    channels a thread): each thread walks segments of output rows, loading every
//                    x column of its 3 window rows once (3 loads an output instead of 9), the 9
//                    taps' weights in registers; pixels (other shapes): one thread per output
//                    pixel and 8 channels (16-byte accesses; a scalar variant otherwise)
//   backward_data    rows where stride is 1 and the multiplier 1 (the forward rows kernel over dy
//                    with the window flipped); pixels: one thread per input pixel and 8 channels
//                    (multiplier 1), or per channel
//   backward_filter  rows (3x3 windows, stride_w and dilation_w 1, 8-byte aligned x and dy, 4
//                    channels a thread): each thread walks segments of output rows, loading every
//                    x column of its 3 window rows once and keeping the last 3 dy in registers
//                    (3 x loads and 1 dy load an output instead of 9 + 1), all 9 taps and the bias
//                    in FP32 registers; one wave of blocks, each summing its threads in a fixed order.
//                    pixels (any other shape): channels x pixel lanes over a slice of the N*P*Q
//                    positions, up to 10 taps a pass (3x3 + db in one).
//                    Either way the slices' partial sums add up in a fixed order in a second kernel
//                    (no atomics: the same inputs give the same bits every run).
// Weights: the bf16 copy in (R, S, K) layout (Bf16WeightLayout::rsk, conv2d_weights_bf16.h), so
// consecutive threads read consecutive channels; dw comes out as (K, 1, R, S), the master's layout.
// F16: every entry point has an f16 overload (f16 activations and weight copy, the same FP32 sums,
// outputs rounded once to f16; Bf16WeightLayout::rsk packed by conv2d_pack_weights_f16_cuda).
// Trap: a backward-filter call takes ctx.workspace (conv2d_direct_nhwc_bf16_workspace_bytes).
#pragma once

#include <cstddef>

#include "core/bf16.h"
#include "core/fp16.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"  // ConvDir

namespace cnn {

// A direction's kernel: automatic takes rows wherever it can (shape and alignment), pixels
// elsewhere; naming one (benchmarks, tests) runs it, or throws if it cannot take the call.
enum class DirectNhwcKernel { automatic, pixels, rows };

// Non-throwing: C / groups == 1 and every tensor below 2^31 elements.
bool conv2d_direct_nhwc_bf16_can_implement(const Conv2dShape& sh);
// Non-throwing: whether the rows kernel of a direction takes the shape (given 8-byte aligned tensors).
bool conv2d_direct_nhwc_bf16_rows_can_implement(const Conv2dShape& sh, ConvDir dir = ConvDir::backward_filter);
// Slices of the N*P*Q positions a backward-filter call sums separately (automatic: the rows
// kernel's where the shape allows it), and the bytes of ctx.workspace a call takes for their
// partial sums, enough for either kernel (forward and backward data take none).
int conv2d_direct_nhwc_bf16_filter_slices(const Conv2dShape& sh, DirectNhwcKernel kernel = DirectNhwcKernel::automatic);
size_t conv2d_direct_nhwc_bf16_workspace_bytes(const Conv2dShape& sh);

// x (N, H, W, C), w (R, S, K), b (K) or null -> y (N, P, Q, K); relu: y = max(y, 0)
void conv2d_forward_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x, const bf16* w,
                                     const float* b, bf16* y, bool relu = false,
                                     DirectNhwcKernel kernel = DirectNhwcKernel::automatic);
void conv2d_forward_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* w,
                                     const float* b, f16* y, bool relu = false,
                                     DirectNhwcKernel kernel = DirectNhwcKernel::automatic);
// w (R, S, K), dy (N, P, Q, K) -> dx (N, H, W, C)
void conv2d_backward_data_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* w, const bf16* dy,
                                           bf16* dx, DirectNhwcKernel kernel = DirectNhwcKernel::automatic);
void conv2d_backward_data_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* w, const f16* dy,
                                           f16* dx, DirectNhwcKernel kernel = DirectNhwcKernel::automatic);
// x (N, H, W, C), dy (N, P, Q, K) -> dw (K, 1, R, S) or null, db (K) or null
void conv2d_backward_filter_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x,
                                             const bf16* dy, float* dw, float* db,
                                             DirectNhwcKernel kernel = DirectNhwcKernel::automatic);
void conv2d_backward_filter_direct_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* dy,
                                             float* dw, float* db,
                                             DirectNhwcKernel kernel = DirectNhwcKernel::automatic);

}  // namespace cnn
