// Internal to conv2d_igemm_nhwc_bf16*.cpp/.cu: how the reduction is cut into slices and how one
// call's workspace is laid out, written once for the host logic and the launchers.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"

namespace cnn {

// Reduction elements per main-loop step of the wgmma tiles (the mma.sync tiles take 32).
inline constexpr int kIgemmNhwcBf16Step = 64;

// Reduction length of one slice: a whole number of the longest step, so every slice starts 16-byte
// aligned and only the last slice has a partial step.
inline int64_t igemm_nhwc_bf16_split_chunk(int64_t red, int splits) {
  const int64_t s = std::max(1, splits);
  const int64_t per = std::max<int64_t>(1, (red + s - 1) / s);
  return (per + kIgemmNhwcBf16Step - 1) / kIgemmNhwcBf16Step * kIgemmNhwcBf16Step;
}

// Slices of the N*P*Q rows the bias-only gradient (dw not wanted) sums separately: at least 4096
// rows a slice, at most 256.
inline int igemm_nhwc_bf16_db_slices(const Conv2dShape& sh) {
  return static_cast<int>(std::clamp<int64_t>((sh.N * sh.P * sh.Q + 4095) / 4096, 1, 256));
}

// Byte offsets into the workspace: FP32 partial sums (splits, M, N) when split; the bias-only
// partials (slices, K) when db is wanted. Each 256-byte aligned.
struct IgemmNhwcBf16WorkspaceLayout {
  size_t partial = 0, db_partial = 0, total = 0;
};
inline IgemmNhwcBf16WorkspaceLayout igemm_nhwc_bf16_workspace_layout(const Conv2dShape& sh, ConvDir dir, int splits,
                                                                     bool db) {
  auto align = [](size_t b) { return (b + 255) / 256 * 256; };
  IgemmNhwcBf16WorkspaceLayout l;
  size_t at = 0;
  if (splits > 1) {
    int64_t m = sh.N * sh.P * sh.Q, n = sh.K;
    if (dir == ConvDir::backward_data) m = sh.N * sh.H * sh.W, n = sh.C;
    if (dir == ConvDir::backward_filter) m = sh.K, n = sh.R * sh.S * sh.C + (db ? 1 : 0);
    l.partial = at;
    at += align(size_t(splits) * size_t(m) * size_t(n) * sizeof(float));
  }
  if (dir == ConvDir::backward_filter && db) {
    l.db_partial = at;
    at += align(size_t(igemm_nhwc_bf16_db_slices(sh)) * size_t(sh.K) * sizeof(float));
  }
  l.total = at;
  return l;
}

}  // namespace cnn
