// Internal to conv2d_direct_nhwc_bf16*.cpp/.cu: the filter gradient's grid (channel lanes, pixel
// lanes, slices, tap groups), written once for the host logic and the launcher.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/conv2d.h"

namespace cnn {

inline constexpr int kDirectNhwcThreads = 256;
inline constexpr int kDirectNhwcTaps = 10;  // taps (and the bias) one filter-gradient pass sums

// Channels a thread takes: 8 (16-byte loads) where the multiplier K / C is 1 with C % 8 == 0, or a
// multiple of 8 (every channel of the chunk reads one input channel); else 1.
inline int direct_nhwc_channel_width(const Conv2dShape& sh) {
  const int64_t mult = sh.K / sh.C;
  return (mult == 1 && sh.C % 8 == 0) || mult % 8 == 0 ? 8 : 1;
}

struct DirectNhwcFilterGrid {
  int lanes_k, lanes_p, groups_k, tap_groups, slices;
};
// Channel chunks of `width` across a power of two of lanes (at most 32, so the lanes of one chunk
// sit lanes_k apart in every warp), the rest of the block's threads over pixels; slices so the
// grid has about 4 blocks a multiprocessor of a large GPU, each thread 4+ pixels.
inline DirectNhwcFilterGrid direct_nhwc_filter_grid(const Conv2dShape& sh, int width) {
  DirectNhwcFilterGrid g;
  const int64_t chunks = sh.K / width;
  g.lanes_k = 1;
  while (g.lanes_k * 2 <= std::min<int64_t>(chunks, 32)) g.lanes_k *= 2;
  g.lanes_p = kDirectNhwcThreads / g.lanes_k;
  g.groups_k = int((chunks + g.lanes_k - 1) / g.lanes_k);
  g.tap_groups = int((sh.R * sh.S + 1 + kDirectNhwcTaps - 1) / kDirectNhwcTaps);
  const int64_t npq = sh.N * sh.P * sh.Q, others = int64_t(g.groups_k) * g.tap_groups;
  const int64_t by_gpu = (528 + others - 1) / others, by_work = npq / (int64_t(g.lanes_p) * 4);
  g.slices = int(std::clamp<int64_t>(std::min(by_gpu, by_work), 1, 4096));
  return g;
}

}  // namespace cnn
