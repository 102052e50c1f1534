// Convolution on tensor cores in BF16 over NHWC (channels-last) tensors: implicit GEMM with both
// operands reduction-contiguous, 16-byte cp.async copies into a multi-stage shared-memory ring,
// ldmatrix and mma.sync m16n8k16 with FP32 accumulators (sm_80+; tuned for sm_90).
//   forward          y (N, P, Q, K) bf16 = conv(x (N, H, W, C) bf16, w (K, R, S, C) bf16)
//                    + b (K) fp32 (optional), then ReLU (optional): rounded once
//   backward_data    dx (N, H, W, C) bf16 from wt (C, R, S, K) bf16 and dy (N, P, Q, K) bf16
//   backward_filter  dw (K, C, R, S) fp32 (PyTorch's layout: it feeds the FP32 master gradient)
//                    and db (K) fp32 from x and dy
// The bf16 weight copies come from the FP32 master through conv2d_pack_weights_bf16_* (krsc for
// forward, crsk for backward data; conv2d_weights_bf16.h), once per weight update.
// GEMM views (M x N, reduction R):
//   forward          M = N*P*Q pixels, N = K,       R = R*S*C  (A = x gathered, B = w rows)
//   backward_data    M = N*H*W pixels, N = C,       R = R*S*K  (A = dy gathered, B = wt rows)
//   backward_filter  M = K,            N = R*S*C (+1 for db), R = N*P*Q
// backward_data gathers dy[n, p, q] with p * stride_h = h + pad_h - r * dilation_h (any stride;
// taps whose residue does not match read zeros). The filter gradient's extra column is a column
// of ones, so db comes out of the same tensor-core sums.
// Trap: the 16-byte path needs C % 8 == 0 (forward, filter) or K % 8 == 0 (data, filter) and
// 16-byte aligned buffers; other shapes run a predicated scalar-load kernel (one tile, slower),
// never refused. C == 1 first layers and depthwise layers belong to conv2d_direct_nhwc_bf16.h.
// Trap: a call may take ctx.workspace (FP32 split partials); conv2d_igemm_nhwc_bf16_workspace_bytes
// says how much. No atomics: results do not depend on scheduling.
// F16: every entry point has an f16 overload, the same kernels with f16 tensor-core inputs
// (mma.sync / wgmma .f16, FP32 accumulators) and outputs rounded once to f16 (core/fp16.h: past
// 65504 they become inf, which fp16 training's loss scaler catches); tiles, plans and workspace are
// the bf16 ones (the element size and the instruction shapes are the same).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/bf16.h"
#include "core/fp16.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "ops/conv2d_igemm_bf16.h"

namespace cnn {

// Block tiles (M x N of the GEMM view), by index; warp tile in brackets. 0-7: mma.sync, reduction
// step 32, padded shared tiles; 8-11: wgmma (sm_90a), reduction step 64, 128-byte swizzled tiles,
// one warpgroup per 64 rows (conv2d_igemm_nhwc_bf16_wgmma_sm90a.cu).
//   0  256 x 128  8 warps [64 x 64]      8  128 x 256  2 warpgroups [64 x 256]
//   1  128 x 256  8 warps [64 x 64]      9  128 x 128  2 warpgroups [64 x 128]
//   2  128 x 128  4 warps [64 x 64]     10  128 x  64  2 warpgroups [64 x 64]
//   3  256 x  64  4 warps [64 x 64]     11   64 x 256  1 warpgroup  [64 x 256]
//   4   64 x 256  4 warps [64 x 64]
//   5  128 x  64  4 warps [64 x 32]
//   6   64 x 128  4 warps [32 x 64]
//   7   64 x  64  4 warps [32 x 32]   small problems; also the only tile of the scalar kernels
// A wgmma tile on a device without wgmma (compute capability other than 9.0, or a build without
// sm_90) runs the mma.sync tile of its size (8 -> 1, 9 -> 2, 10 -> 5, 11 -> 4).
inline constexpr int kIgemmNhwcBf16Tiles = 12;
inline constexpr int kIgemmNhwcBf16WgmmaFirst = 8;
inline constexpr int kIgemmNhwcBf16ScalarTile = 7;
struct IgemmNhwcBf16TileInfo {
  int bm, bn, threads, stages;
};
IgemmNhwcBf16TileInfo conv2d_igemm_nhwc_bf16_tile_info(int tile);  // throws for an unknown index
std::string conv2d_igemm_nhwc_bf16_tile_name(int tile);            // "256x128" ..., "wg128x256" ...

// How one call runs: the block tile and the slices the reduction is cut into (each slice writes
// FP32 partials to the workspace; a second kernel adds them in slice order).
struct IgemmNhwcBf16Plan {
  int tile = 2;
  int splits = 1;
};

// The GEMM view of a direction (db: the filter gradient's column of ones).
IgemmBf16Gemm conv2d_igemm_nhwc_bf16_gemm(const Conv2dShape& sh, ConvDir dir, bool db = false);

// Non-throwing: groups == 1 and every tensor and GEMM dimension below 2^31 elements.
bool conv2d_igemm_nhwc_bf16_can_implement(const Conv2dShape& sh);
// Non-throwing: whether a direction takes the 16-byte kernels (channel counts; the buffers' 16-byte
// alignment is checked at the call too). Otherwise the scalar kernels run, with tile 7.
bool conv2d_igemm_nhwc_bf16_vectorized(const Conv2dShape& sh, ConvDir dir);

// The plan the entry points use when given none: a cost model over tiles and splits (waves of
// blocks on `num_sms` multiprocessors, the tile's measured efficiency, the partials' traffic),
// within `workspace_limit` bytes; wgmma: the wgmma tiles may be chosen (the device runs them:
// conv2d_igemm_nhwc_bf16_wgmma_usable); only_tile >= 0 keeps that tile (the benchmark's sweep). Pure.
IgemmNhwcBf16Plan conv2d_igemm_nhwc_bf16_choose_plan(const Conv2dShape& sh, ConvDir dir, int num_sms,
                                                     size_t workspace_limit, bool wgmma, int only_tile = -1);
// Fewest splits choose_plan gives a direction: the filter gradient's slices sum at most 64K pixels
// (the tensor cores' FP32 accumulation drifts ~1e-9 relative per term), others 1.
int conv2d_igemm_nhwc_bf16_min_splits(const Conv2dShape& sh, ConvDir dir);
// Splits that `plan` really runs with (each slice at least one reduction step).
int conv2d_igemm_nhwc_bf16_effective_splits(const Conv2dShape& sh, ConvDir dir, const IgemmNhwcBf16Plan& plan);
// Bytes of ctx.workspace one call takes with `plan` (db: the bias gradient is wanted too).
size_t conv2d_igemm_nhwc_bf16_workspace_bytes(const Conv2dShape& sh, ConvDir dir, const IgemmNhwcBf16Plan& plan,
                                              bool db = false);

// Whether the current device runs the wgmma tiles (compute capability 9.0 and a build with sm_90).
bool conv2d_igemm_nhwc_bf16_wgmma_usable();
// The plan the entry points take when given none, with workspace_limit in place of
// ctx.workspace_limit_bytes: choose_plan with the current device's multiprocessor count and wgmma
// where usable. Queries the device (CUDA builds; the stand-in throws).
IgemmNhwcBf16Plan conv2d_igemm_nhwc_bf16_device_plan(const Conv2dShape& sh, ConvDir dir, size_t workspace_limit);

// CUDA entry points: device memory, queued on ctx.cuda_stream; `plan` null = choose_plan with the
// device's multiprocessor count, ctx.workspace_limit_bytes and wgmma where usable. Throw where !can_implement. A plan
// whose tile the shape cannot run (a scalar shape with a tile other than 7) runs tile 7.
// x (N, H, W, C), w (K, R, S, C), b (K) or null -> y (N, P, Q, K); relu: y = max(y, 0)
void conv2d_forward_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x, const bf16* w,
                                    const float* b, bf16* y, bool relu = false,
                                    const IgemmNhwcBf16Plan* plan = nullptr);
void conv2d_forward_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* w,
                                    const float* b, f16* y, bool relu = false, const IgemmNhwcBf16Plan* plan = nullptr);
// wt (C, R, S, K), dy (N, P, Q, K) -> dx (N, H, W, C)
void conv2d_backward_data_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* wt,
                                          const bf16* dy, bf16* dx, const IgemmNhwcBf16Plan* plan = nullptr);
void conv2d_backward_data_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* wt, const f16* dy,
                                          f16* dx, const IgemmNhwcBf16Plan* plan = nullptr);
// x (N, H, W, C), dy (N, P, Q, K) -> dw (K, C, R, S) or null, db (K) or null
void conv2d_backward_filter_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x,
                                            const bf16* dy, float* dw, float* db,
                                            const IgemmNhwcBf16Plan* plan = nullptr);
void conv2d_backward_filter_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* dy,
                                            float* dw, float* db, const IgemmNhwcBf16Plan* plan = nullptr);

}  // namespace cnn
