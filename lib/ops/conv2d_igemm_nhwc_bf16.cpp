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
// Relative tensor-core throughput of a multiprocessor full of each tile, from the sweep of the
// first H200 run (2025 bench/RESULTS.md: 128 x 128 peaks, 256 x 128 at one block a multiprocessor
// runs ~0.85 of it; a 64 x 64 warp tile reads 1/32 byte of shared memory per FLOP, the most
// mma.sync can be fed from ldmatrix, 64 x 32 needs 1.5x that, 32 x 32 2x); the wgmma tiles read B
// once per warpgroup and issue one instruction per 64 x N x 16 (leads until measured). Blocks of
// each tile resident per multiprocessor (shared memory; registers: 64 x 64 warp tiles ~230).
constexpr double kTileEfficiency[kIgemmNhwcBf16Tiles] = {0.85, 0.85, 1.0, 0.9, 0.9, 0.75,
                                                         0.75, 0.55, 1.8, 1.6, 1.3, 1.5};
constexpr int kBlocksPerSm[kIgemmNhwcBf16Tiles] = {1, 1, 2, 2, 2, 3, 3, 4, 1, 1, 2, 1};
// mma.sync BF16 rate of one H100/H200 multiprocessor (about 2/3 of the wgmma peak), device memory
// bandwidth, the cost of one more launch, and the time a block spends filling its pipeline and
// writing its tile (charged as extra reduction elements).
constexpr double kSmFlops = 4.0e12, kBandwidth = 3.5e12, kLaunchSeconds = 4e-6;
constexpr int kFillElements = 128;
// Rate of a multiprocessor with few warps, extrapolated to none (4 warps: 0.5 + 0.5 / 2).
constexpr double kLoneWarpsRate = 0.5;
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

IgemmNhwcBf16Plan conv2d_igemm_nhwc_bf16_choose_plan(const Conv2dShape& sh, ConvDir dir, int num_sms,
                                                     size_t workspace_limit, bool wgmma, int only_tile) {
  const IgemmBf16Gemm g = conv2d_igemm_nhwc_bf16_gemm(sh, dir, dir == ConvDir::backward_filter && sh.has_bias);
  const bool vec = conv2d_igemm_nhwc_bf16_vectorized(sh, dir);
  const double sms = std::max(1, num_sms);
  IgemmNhwcBf16Plan best{only_tile >= 0 ? only_tile : kIgemmNhwcBf16ScalarTile, 1};
  double best_seconds = INFINITY;
  for (int tile = 0; tile < kIgemmNhwcBf16Tiles; ++tile) {
    if (only_tile >= 0 && tile != only_tile) continue;
    if (!vec && tile != kIgemmNhwcBf16ScalarTile && only_tile < 0) continue;  // the scalar kernels have one tile
    if (!wgmma && tile >= kIgemmNhwcBf16WgmmaFirst && only_tile < 0) continue;
    const IgemmNhwcBf16TileInfo t = kTiles[tile];
    const int64_t tiles = ceil_div(g.m, t.bm) * ceil_div(g.n, t.bn);
    for (int splits : kSplitCandidates) {
      const IgemmNhwcBf16Plan plan{tile, splits};
      const int s = conv2d_igemm_nhwc_bf16_effective_splits(sh, dir, plan);
      if (s != splits) continue;  // the same as a smaller candidate
      if (s > 1 && conv2d_igemm_nhwc_bf16_workspace_bytes(sh, dir, plan, false) > workspace_limit) continue;
      const int64_t chunk = igemm_nhwc_bf16_split_chunk(g.red, s);
      // Blocks resident on a multiprocessor share its rate; fewer than 8 warps there leave mma
      // latency uncovered (a multiprocessor's rate grows with its warps up to 8).
      const double blocks = double(tiles * s);
      const double resident = std::min<double>(kBlocksPerSm[tile], std::ceil(blocks / sms));
      const double waves = std::ceil(blocks / (sms * resident));
      const double util = std::min(1.0, kLoneWarpsRate + (1.0 - kLoneWarpsRate) * resident * t.threads / 32 / 8);
      const double steps = double(chunk + kFillElements);
      double seconds = waves * resident * (2.0 * t.bm * t.bn * steps) / (kTileEfficiency[tile] * util * kSmFlops);
      if (s > 1) seconds += 2.0 * s * double(g.m) * double(g.n) * sizeof(float) / kBandwidth + kLaunchSeconds;
      if (seconds < best_seconds * 0.999) {
        best_seconds = seconds;
        best = plan;
      }
    }
  }
  return best;
}

}  // namespace cnn
