// Internal to conv2d_igemm_bf16*.cpp/.cu: how the reduction is cut into slices and how one call's
// workspace is laid out, written once for the host logic and the launcher.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"

namespace cnn {

inline constexpr int kIgemmBf16Step = 32;  // reduction elements per main-loop step (BK)

// Reduction length of one slice: a whole number of steps, so every slice starts 16-byte aligned.
inline int64_t igemm_bf16_split_chunk(int64_t red, int splits) {
  const int64_t s = std::max(1, splits);
  const int64_t per = std::max<int64_t>(1, (red + s - 1) / s);
  return (per + kIgemmBf16Step - 1) / kIgemmBf16Step * kIgemmBf16Step;
}

// Blocks per output channel of the bias-gradient sum over N*P*Q: at least 4096 elements a block,
// at most about 1024 blocks in all (more only adds partials to sum).
inline int igemm_bf16_db_groups(const Conv2dShape& sh) {
  const int64_t by_work = (sh.N * sh.P * sh.Q + 4095) / 4096, by_blocks = (1024 + sh.K - 1) / sh.K;
  return static_cast<int>(std::max<int64_t>(1, std::min(by_work, by_blocks)));
}

// Byte offsets into the workspace: transposed weights (backward_data: (C, K, R, S) bf16), FP32
// partial sums (splits, M, N) when split, bias partials (groups, K) when db is split over groups.
struct IgemmBf16WorkspaceLayout {
  size_t wt = 0, partial = 0, db_partial = 0, total = 0;
};
inline IgemmBf16WorkspaceLayout igemm_bf16_workspace_layout(const Conv2dShape& sh, ConvDir dir, int splits, bool db) {
  auto align = [](size_t b) { return (b + 255) / 256 * 256; };
  IgemmBf16WorkspaceLayout l;
  size_t at = 0;
  if (dir == ConvDir::backward_data) {
    l.wt = at;
    at += align(size_t(sh.K * sh.C * sh.R * sh.S) * 2);
  }
  if (splits > 1) {
    int64_t m = sh.K, n = sh.C * sh.R * sh.S;
    if (dir == ConvDir::forward) n = sh.N * sh.P * sh.Q;
    if (dir == ConvDir::backward_data) m = sh.C, n = sh.N * sh.H * sh.W;
    l.partial = at;
    at += align(size_t(splits) * size_t(m) * size_t(n) * sizeof(float));
  }
  if (dir == ConvDir::backward_filter && db && igemm_bf16_db_groups(sh) > 1) {
    l.db_partial = at;
    at += align(size_t(igemm_bf16_db_groups(sh)) * size_t(sh.K) * sizeof(float));
  }
  l.total = at;
  return l;
}

}  // namespace cnn
