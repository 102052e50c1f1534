// Convolution on tensor cores in BF16 (sm_80+ mma.sync m16n8k16, FP32 accumulators), implicit
// GEMM over NCHW tensors: the im2col matrix is never written, each tile gathers it on the fly.
//   forward          y (bf16)  = conv(x (bf16), w (bf16)) + b (fp32, optional)
//   backward_data    dx (bf16) from w (bf16), dy (bf16)
//   backward_filter  dw (fp32), db (fp32, optional) from x (bf16), dy (bf16)
// FP32 stays FP32 where it feeds FP32 state: the accumulators, the bias (the master copy is read
// directly), and the filter and bias gradients (they feed the FP32 master gradient). BF16 is the
// storage of activations, their gradients and the weights' working copy (a bf16 copy of the FP32
// master weights, cast_bf16.h). Every output is rounded once, from the FP32 sum (core/bf16.h's
// rounding), so the CPU emulation can reproduce the bits of a rounding point exactly.
// GEMM views (M x N, reduction R):
//   forward          M = K, N = N*P*Q, R = C*R*S   (A = w rows, B = gathered x)
//   backward_data    M = C, N = N*H*W, R = K*R*S   (A = w transposed in the workspace, B = gathered dy)
//   backward_filter  M = K, N = C*R*S, R = N*P*Q   (A = dy rows, B = gathered x)
// Trap: groups must be 1 (depthwise convolutions stay direct kernels); C == 1 first layers work
// here but waste most of the reduction step (R = R*S < 32), so a direct kernel serves them better.
// Trap: a call may take ctx.workspace (weights transposed for backward_data; FP32 partial sums
// when the reduction is split); conv2d_igemm_bf16_workspace_bytes says how much. Nothing
// accumulates with atomics: results do not depend on scheduling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/bf16.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"

namespace cnn {

// Block tiles (M x N of the GEMM view, reduction step 32), by index.
//   0  128 x 128, 8 warps (64 x 32 each)      large M and N
//   1  128 x  64, 4 warps (64 x 32)           large M, small N (backward_filter of few taps)
//   2   64 x 128, 4 warps (32 x 64)           small M (few output channels), large N
//   3   64 x  64, 4 warps (32 x 32)           small problems: more blocks to fill the GPU
inline constexpr int kIgemmBf16Tiles = 4;
struct IgemmBf16TileInfo {
  int bm, bn, threads;
};
IgemmBf16TileInfo conv2d_igemm_bf16_tile_info(int tile);  // throws for an unknown index
std::string conv2d_igemm_bf16_tile_name(int tile);        // "128x128" ...

// How one call runs: the block tile and how many slices the reduction is cut into (each slice
// writes FP32 partial sums to the workspace; a second kernel adds them in slice order).
struct IgemmBf16Plan {
  int tile = 0;
  int splits = 1;
};

// The GEMM view of a direction (see the top of this file).
struct IgemmBf16Gemm {
  int64_t m = 0, n = 0, red = 0;
};
IgemmBf16Gemm conv2d_igemm_bf16_gemm(const Conv2dShape& sh, ConvDir dir);

// Non-throwing: groups == 1 and every tensor and GEMM dimension below 2^31 elements (int32
// indices). Any stride, padding, dilation, odd size or channel count is taken: ragged tiles and
// reductions whose length is not a multiple of 8 are predicated (slower scalar loads), not refused.
bool conv2d_igemm_bf16_can_implement(const Conv2dShape& sh);

// The plan the entry points use when given none: a cost model over tiles and splits (waves of
// blocks on `num_sms` multiprocessors, tile efficiency, the partial sums' extra traffic), keeping
// the workspace within `workspace_limit` bytes; only_tile >= 0 keeps that tile (the benchmark's
// sweep). A pure function of its arguments.
IgemmBf16Plan conv2d_igemm_bf16_choose_plan(const Conv2dShape& sh, ConvDir dir, int num_sms, size_t workspace_limit,
                                            int only_tile = -1);
// Splits that `plan` really runs with (clamped so each slice has at least one reduction step).
int conv2d_igemm_bf16_effective_splits(const Conv2dShape& sh, ConvDir dir, const IgemmBf16Plan& plan);

// Bytes of ctx.workspace one call takes with `plan` (db: the bias gradient is wanted too).
size_t conv2d_igemm_bf16_workspace_bytes(const Conv2dShape& sh, ConvDir dir, const IgemmBf16Plan& plan,
                                         bool db = false);

// CUDA entry points: device memory, queued on ctx.cuda_stream; `plan` null = choose_plan with the
// device's multiprocessor count and ctx.workspace_limit_bytes. Throw where !can_implement.
// x (N, C, H, W), w (K, C, R, S), b (K) or null -> y (N, K, P, Q)
void conv2d_forward_igemm_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x, const bf16* w,
                                    const float* b, bf16* y, const IgemmBf16Plan* plan = nullptr);
// w (K, C, R, S), dy (N, K, P, Q) -> dx (N, C, H, W)
void conv2d_backward_data_igemm_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* w,
                                          const bf16* dy, bf16* dx, const IgemmBf16Plan* plan = nullptr);
// x (N, C, H, W), dy (N, K, P, Q) -> dw (K, C, R, S), db (K) or null
void conv2d_backward_filter_igemm_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x,
                                            const bf16* dy, float* dw, float* db,
                                            const IgemmBf16Plan* plan = nullptr);

}  // namespace cnn
