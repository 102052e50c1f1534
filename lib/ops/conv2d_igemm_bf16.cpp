// Host logic of the BF16 implicit-GEMM convolution, compiled in every build so CPU-only CI tests
// it: the tiles, the GEMM view of each direction, can_implement, the plan's cost model and the
// workspace it needs. The kernels are in conv2d_igemm_bf16_cuda.cu.
// Trap: the workspace layout here (transposed weights, split partials, bias partials, each
// 256-byte aligned) is the one the CUDA file carves; both call igemm_bf16_workspace_layout.
#include "ops/conv2d_igemm_bf16.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/conv2d_igemm_bf16_layout.h"

namespace cnn {
namespace {

constexpr IgemmBf16TileInfo kTiles[kIgemmBf16Tiles] = {{128, 128, 256}, {128, 64, 128}, {64, 128, 128}, {64, 64, 128}};
// Relative mma throughput of a multiprocessor full of each tile, and blocks of it resident per
// multiprocessor (registers: 128x128 ~170 a thread at 256 threads; the others <= 216 at 128, 64x64
// <= 153). The kernels are issue-bound: a gathered element costs ~4 instructions and is used by BM
// rows, so SASS instructions per HMMA in the main loop (sm_90, forward / backward filter) are
// 128x128 8.5 / 12, 128x64 9.4 / 12.7, 64x128 14 / 17.6, 64x64 16.4 / 23: efficiency ~ their inverse.
constexpr double kTileEfficiency[kIgemmBf16Tiles] = {1.0, 0.9, 0.6, 0.5};
constexpr int kBlocksPerSm[kIgemmBf16Tiles] = {1, 2, 2, 3};
// Leads for the cost model, not measurements: mma.sync BF16 rate of one H100/H200 multiprocessor
// on the 128 x 128 tile, device memory bandwidth, the cost of one more kernel launch.
constexpr double kSmFlops = 2.5e12, kBandwidth = 3.0e12, kLaunchSeconds = 4e-6;
constexpr int kSplitCandidates[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};
constexpr int64_t kInt32Max = 0x7fffffff;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

IgemmBf16TileInfo conv2d_igemm_bf16_tile_info(int tile) {
  CNN_CHECK(tile >= 0 && tile < kIgemmBf16Tiles, "igemm bf16: tile index {} outside [0, {})", tile, kIgemmBf16Tiles);
  return kTiles[tile];
}

std::string conv2d_igemm_bf16_tile_name(int tile) {
  const IgemmBf16TileInfo t = conv2d_igemm_bf16_tile_info(tile);
  return std::to_string(t.bm) + "x" + std::to_string(t.bn);
}

IgemmBf16Gemm conv2d_igemm_bf16_gemm(const Conv2dShape& sh, ConvDir dir) {
  switch (dir) {
    case ConvDir::forward:
      return {sh.K, sh.N * sh.P * sh.Q, sh.C * sh.R * sh.S};
    case ConvDir::backward_data:
      return {sh.C, sh.N * sh.H * sh.W, sh.K * sh.R * sh.S};
    case ConvDir::backward_filter:
      return {sh.K, sh.C * sh.R * sh.S, sh.N * sh.P * sh.Q};
  }
  return {};
}

bool conv2d_igemm_bf16_can_implement(const Conv2dShape& sh) {
  if (sh.groups != 1 || sh.N < 1 || sh.C < 1 || sh.K < 1 || sh.P < 1 || sh.Q < 1) return false;
  const int64_t sizes[] = {sh.N * sh.C * sh.H * sh.W, sh.N * sh.K * sh.P * sh.Q, sh.K * sh.C * sh.R * sh.S,
                           sh.N * sh.H * sh.W, sh.N * sh.P * sh.Q};
  for (int64_t s : sizes)
    if (s > kInt32Max) return false;
  return true;
}

int conv2d_igemm_bf16_effective_splits(const Conv2dShape& sh, ConvDir dir, const IgemmBf16Plan& plan) {
  const int64_t red = conv2d_igemm_bf16_gemm(sh, dir).red;
  const int64_t chunk = igemm_bf16_split_chunk(red, plan.splits);
  return static_cast<int>(std::max<int64_t>(1, ceil_div(red, chunk)));
}

size_t conv2d_igemm_bf16_workspace_bytes(const Conv2dShape& sh, ConvDir dir, const IgemmBf16Plan& plan, bool db) {
  return igemm_bf16_workspace_layout(sh, dir, conv2d_igemm_bf16_effective_splits(sh, dir, plan), db).total;
}

IgemmBf16Plan conv2d_igemm_bf16_choose_plan(const Conv2dShape& sh, ConvDir dir, int num_sms, size_t workspace_limit,
                                            int only_tile) {
  const IgemmBf16Gemm g = conv2d_igemm_bf16_gemm(sh, dir);
  const double sms = std::max(1, num_sms);
  IgemmBf16Plan best{only_tile >= 0 ? only_tile : 0, 1};
  double best_seconds = INFINITY;
  for (int tile = 0; tile < kIgemmBf16Tiles; ++tile) {
    if (only_tile >= 0 && tile != only_tile) continue;
    const IgemmBf16TileInfo t = kTiles[tile];
    const int64_t tiles = ceil_div(g.m, t.bm) * ceil_div(g.n, t.bn);
    for (int splits : kSplitCandidates) {
      const IgemmBf16Plan plan{tile, splits};
      const int s = conv2d_igemm_bf16_effective_splits(sh, dir, plan);
      if (s != splits) continue;  // the same as a smaller candidate
      if (s > 1 && conv2d_igemm_bf16_workspace_bytes(sh, dir, plan, false) > workspace_limit) continue;
      const int64_t chunk = igemm_bf16_split_chunk(g.red, s);
      const double blocks = double(tiles * s), waves = std::ceil(blocks / (sms * kBlocksPerSm[tile]));
      // Blocks sharing a multiprocessor split its rate; fewer blocks than multiprocessors share none.
      const double sharing = std::min<double>(kBlocksPerSm[tile], std::ceil(blocks / sms));
      double seconds = waves * (2.0 * t.bm * t.bn * double(chunk)) * sharing / (kTileEfficiency[tile] * kSmFlops);
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
