// Host logic of the NHWC BF16 implicit-GEMM convolution, compiled in every build so CPU-only CI
// tests it: the tiles, the GEMM view of each direction, can_implement, the plan's cost model and
// the workspace. The kernels are in conv2d_igemm_nhwc_bf16_cuda.cu and ..._filter_cuda.cu.
// Trap: the workspace layout here (FP32 split partials, then the db-only partials) is the one the
// CUDA files carve; both call igemm_nhwc_bf16_workspace_layout.
#include "ops/conv2d_igemm_nhwc_bf16.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/conv2d_igemm_nhwc_bf16_layout.h"

namespace cnn {
namespace {

constexpr IgemmNhwcBf16TileInfo kTiles[kIgemmNhwcBf16Tiles] = {
    {256, 128, 256, 4}, {128, 256, 256, 4}, {128, 128, 128, 4}, {256, 64, 128, 4},
    {64, 256, 128, 4},  {128, 64, 128, 4},  {64, 128, 128, 4},  {64, 64, 128, 4},
    {128, 256, 256, 4}, {128, 128, 256, 5}, {128, 64, 256, 4},  {64, 256, 128, 4}};
// Relative tensor-core throughput of a multiprocessor full of each tile, fitted to the sweep of
// the second H200 run (bench/RESULTS.md) with kSmFlops below: mma.sync 128 x 128 (2 blocks a
// multiprocessor) 1.0, 256 x 128 at one block 0.82, 64-wide tiles ~0.7 (their short reductions
// included); wgmma 128 x 256 1.6, 128 x 128 1.37, 128 x 64 0.95, 64 x 256 1.5 (one warpgroup, so
// also charged kLoneWarpsRate). Blocks of each tile resident per multiprocessor (shared memory;
// registers: the 64 x 64 mma.sync warp tiles and the n256 wgmma accumulators take ~200-240).
constexpr double kTileEfficiency[kIgemmNhwcBf16Tiles] = {0.82, 0.8, 1.0, 0.8, 0.8, 0.7, 0.7, 0.5, 1.6, 1.37, 0.95, 1.5};
constexpr int kBlocksPerSm[kIgemmNhwcBf16Tiles] = {1, 1, 2, 2, 2, 3, 3, 4, 1, 1, 2, 1};
// The filter gradient's tiles run at about 0.7 of the others' rate (both operands pixel-major, a
// window decoded per pixel row and step; measured 0.62 before the row-shared decode).
constexpr double kFilterRate = 0.7;
// mma.sync BF16 rate of one H200 multiprocessor on the 128 x 128 tile (fitted, as above), device
// memory bandwidth, the cost of one more launch, and the time a block spends filling its pipeline
// and writing its tile (charged as extra reduction elements).
constexpr double kSmFlops = 2.7e12, kBandwidth = 3.5e12, kLaunchSeconds = 4e-6;
constexpr int kFillElements = 192;
// Rate of a multiprocessor with few warps, extrapolated to none (4 warps: 0.5 + 0.5 / 2).
constexpr double kLoneWarpsRate = 0.5;
// Longest reduction one slice of the filter gradient sums: the tensor cores' FP32 accumulation
// loses ~1e-9 relative per term (measured: 1.2e-3 over 1M terms, 4.8e-5 over 42K), so slices
// of at most 64K keep dw within ~1e-4 of the FP32 reference.
constexpr int64_t kMaxSliceReduction = 65536;
constexpr int kSplitCandidates[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};
constexpr int64_t kInt32Max = 0x7fffffff;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

IgemmNhwcBf16TileInfo conv2d_igemm_nhwc_bf16_tile_info(int tile) {
  CNN_CHECK(tile >= 0 && tile < kIgemmNhwcBf16Tiles, "igemm nhwc bf16: tile index {} outside [0, {})", tile,
            kIgemmNhwcBf16Tiles);
  return kTiles[tile];
}

std::string conv2d_igemm_nhwc_bf16_tile_name(int tile) {
  const IgemmNhwcBf16TileInfo t = conv2d_igemm_nhwc_bf16_tile_info(tile);
  return (tile >= kIgemmNhwcBf16WgmmaFirst ? "wg" : "") + std::to_string(t.bm) + "x" + std::to_string(t.bn);
}

IgemmBf16Gemm conv2d_igemm_nhwc_bf16_gemm(const Conv2dShape& sh, ConvDir dir, bool db) {
  switch (dir) {
    case ConvDir::forward:
      return {sh.N * sh.P * sh.Q, sh.K, sh.R * sh.S * sh.C};
    case ConvDir::backward_data:
      return {sh.N * sh.H * sh.W, sh.C, sh.R * sh.S * sh.K};
    case ConvDir::backward_filter:
      return {sh.K, sh.R * sh.S * sh.C + (db ? 1 : 0), sh.N * sh.P * sh.Q};
  }
  return {};
}

bool conv2d_igemm_nhwc_bf16_can_implement(const Conv2dShape& sh) {
  if (sh.groups != 1 || sh.N < 1 || sh.C < 1 || sh.K < 1 || sh.P < 1 || sh.Q < 1) return false;
  const int64_t sizes[] = {sh.N * sh.C * sh.H * sh.W, sh.N * sh.K * sh.P * sh.Q, sh.K * sh.C * sh.R * sh.S + 1,
                           sh.N * sh.H * sh.W, sh.N * sh.P * sh.Q};
  for (int64_t s : sizes)
    if (s > kInt32Max) return false;
  return true;
}

bool conv2d_igemm_nhwc_bf16_vectorized(const Conv2dShape& sh, ConvDir dir) {
  switch (dir) {
    case ConvDir::forward:
      return sh.C % 8 == 0;
    case ConvDir::backward_data:
      return sh.K % 8 == 0;
    case ConvDir::backward_filter:
      return sh.C % 8 == 0 && sh.K % 8 == 0;
  }
  return false;
}

int conv2d_igemm_nhwc_bf16_effective_splits(const Conv2dShape& sh, ConvDir dir, const IgemmNhwcBf16Plan& plan) {
  const int64_t red = conv2d_igemm_nhwc_bf16_gemm(sh, dir).red;
  const int64_t chunk = igemm_nhwc_bf16_split_chunk(red, plan.splits);
  return static_cast<int>(std::max<int64_t>(1, ceil_div(red, chunk)));
}

size_t conv2d_igemm_nhwc_bf16_workspace_bytes(const Conv2dShape& sh, ConvDir dir, const IgemmNhwcBf16Plan& plan,
                                              bool db) {
  return igemm_nhwc_bf16_workspace_layout(sh, dir, conv2d_igemm_nhwc_bf16_effective_splits(sh, dir, plan), db).total;
}

int conv2d_igemm_nhwc_bf16_min_splits(const Conv2dShape& sh, ConvDir dir) {
  if (dir != ConvDir::backward_filter) return 1;
  return static_cast<int>(std::max<int64_t>(1, ceil_div(sh.N * sh.P * sh.Q, kMaxSliceReduction)));
}

IgemmNhwcBf16Plan conv2d_igemm_nhwc_bf16_choose_plan(const Conv2dShape& sh, ConvDir dir, int num_sms,
                                                     size_t workspace_limit, bool wgmma, int only_tile) {
  const IgemmBf16Gemm g = conv2d_igemm_nhwc_bf16_gemm(sh, dir, dir == ConvDir::backward_filter && sh.has_bias);
  const bool vec = conv2d_igemm_nhwc_bf16_vectorized(sh, dir);
  const double sms = std::max(1, num_sms), rate = dir == ConvDir::backward_filter ? kFilterRate : 1.0;
  IgemmNhwcBf16Plan best{only_tile >= 0 ? only_tile : kIgemmNhwcBf16ScalarTile, 1};
  double best_seconds = INFINITY;
  // Slices short enough for the filter gradient's accuracy first; without that bound only where
  // the workspace limit leaves no such plan.
  for (int min_splits : {conv2d_igemm_nhwc_bf16_min_splits(sh, dir), 1}) {
    for (int tile = 0; tile < kIgemmNhwcBf16Tiles; ++tile) {
      if (only_tile >= 0 && tile != only_tile) continue;
      if (!vec && tile != kIgemmNhwcBf16ScalarTile && only_tile < 0) continue;  // the scalar kernels: one tile
      if (!wgmma && tile >= kIgemmNhwcBf16WgmmaFirst && only_tile < 0) continue;
      const IgemmNhwcBf16TileInfo t = kTiles[tile];
      const int64_t tiles = ceil_div(g.m, t.bm) * ceil_div(g.n, t.bn);
      for (int splits : kSplitCandidates) {
        const IgemmNhwcBf16Plan plan{tile, splits};
        const int s = conv2d_igemm_nhwc_bf16_effective_splits(sh, dir, plan);
        if (s != splits || s < min_splits) continue;  // the same as a smaller candidate, or too long a slice
        if (s > 1 && conv2d_igemm_nhwc_bf16_workspace_bytes(sh, dir, plan, false) > workspace_limit) continue;
        const int64_t chunk = igemm_nhwc_bf16_split_chunk(g.red, s);
        // Blocks resident on a multiprocessor share its rate; fewer than 8 warps there leave the
        // tensor cores' latency uncovered (a multiprocessor's rate grows with its warps up to 8).
        const double blocks = double(tiles * s);
        const double resident = std::min<double>(kBlocksPerSm[tile], std::ceil(blocks / sms));
        const double waves = std::ceil(blocks / (sms * resident));
        const double util = std::min(1.0, kLoneWarpsRate + (1.0 - kLoneWarpsRate) * resident * t.threads / 32 / 8);
        const double work = 2.0 * t.bm * t.bn * double(chunk + kFillElements);
        double seconds = waves * resident * work / (kTileEfficiency[tile] * util * rate * kSmFlops);
        if (s > 1) seconds += 2.0 * s * double(g.m) * double(g.n) * sizeof(float) / kBandwidth + kLaunchSeconds;
        if (seconds < best_seconds * 0.999) {
          best_seconds = seconds;
          best = plan;
        }
      }
    }
    if (best_seconds < INFINITY) break;
  }
  return best;
}

}  // namespace cnn
