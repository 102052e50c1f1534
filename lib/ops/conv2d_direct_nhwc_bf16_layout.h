// Internal to conv2d_direct_nhwc_bf16*.cpp/.cu: the filter gradient's grids, written once for the
// host logic and the launcher: the pixels kernel's (channel lanes, pixel lanes, slices, tap groups)
// and the rows kernel's (channel lanes, row-segment lanes, segments, slices).
// Trap: the workspace covers both kernels' slices (a call may take either: alignment, benchmarks).
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/conv2d.h"

namespace cnn {

inline constexpr int kDirectNhwcThreads = 256;
inline constexpr int kDirectNhwcTaps = 10;  // taps (and the bias) one filter-gradient pass sums
// The rows kernel: 4 channels a thread (8-byte accesses), a 3 x 3 window, and a grid of about 2
// resident blocks on each of 132 multiprocessors (its __launch_bounds__), so it runs in one wave.
inline constexpr int kDirectNhwcRowWidth = 4;
inline constexpr int kDirectNhwcRowBlocks = 2 * 132;
// What an item costs a lane beyond its steps, in steps: its setup and its loads' first round trip
// (a lane's walk starts each item with no loads in flight).
inline constexpr int kDirectNhwcItemSteps = 4;

// Channels a thread takes: 8 (16-byte loads) where the multiplier K / C is 1 with C % 8 == 0, or a
// multiple of 8 (every channel of the chunk reads one input channel); else 1.
inline int direct_nhwc_channel_width(const Conv2dShape& sh) {
  const int64_t mult = sh.K / sh.C;
  return (mult == 1 && sh.C % 8 == 0) || mult % 8 == 0 ? 8 : 1;
}

// Channel chunks across a power of two of lanes (at most 32, so the lanes of one chunk sit lanes_k
// apart in every warp), the rest of the block's threads over pixels (or row segments).
inline int direct_nhwc_lanes_k(int64_t chunks) {
  int lanes_k = 1;
  while (lanes_k * 2 <= std::min<int64_t>(chunks, 32)) lanes_k *= 2;
  return lanes_k;
}

struct DirectNhwcFilterGrid {
  int lanes_k, lanes_p, groups_k, tap_groups, slices;
};
// The pixels kernel: slices so the grid has about 4 blocks a multiprocessor of a large GPU, each
// thread 4+ pixels.
inline DirectNhwcFilterGrid direct_nhwc_filter_grid(const Conv2dShape& sh, int width) {
  DirectNhwcFilterGrid g;
  const int64_t chunks = sh.K / width;
  g.lanes_k = direct_nhwc_lanes_k(chunks);
  g.lanes_p = kDirectNhwcThreads / g.lanes_k;
  g.groups_k = int((chunks + g.lanes_k - 1) / g.lanes_k);
  g.tap_groups = int((sh.R * sh.S + 1 + kDirectNhwcTaps - 1) / kDirectNhwcTaps);
  const int64_t npq = sh.N * sh.P * sh.Q, others = int64_t(g.groups_k) * g.tap_groups;
  const int64_t by_gpu = (528 + others - 1) / others, by_work = npq / (int64_t(g.lanes_p) * 4);
  g.slices = int(std::clamp<int64_t>(std::min(by_gpu, by_work), 1, 4096));
  return g;
}

// Whether the rows kernel takes the shape (8-byte aligned x and dy aside): a 3 x 3 window walked
// along the output row (stride_w and dilation_w 1; stride_h, dilation_h, padding free), 4 output
// channels a thread that read 4 input channels (multiplier 1) or one (a multiple of 4).
inline bool direct_nhwc_rows_shape(const Conv2dShape& sh) {
  const int64_t mult = sh.K / sh.C;
  return sh.R == 3 && sh.S == 3 && sh.stride_w == 1 && sh.dilation_w == 1 &&
         ((mult == 1 && sh.C % kDirectNhwcRowWidth == 0) || mult % kDirectNhwcRowWidth == 0);
}

// Whether the rows kernels of the forward pass and the data gradient take the shape (8-byte
// aligned tensors aside): the filter gradient's conditions; the data gradient also needs stride 1
// and multiplier 1 (it is then the forward pass over dy with the window flipped).
inline bool direct_nhwc_rows_data_shape(const Conv2dShape& sh) {
  return direct_nhwc_rows_shape(sh) && sh.K == sh.C && sh.stride_h == 1;
}

// A rows kernel's work: items (n, segment, row), the row fastest, each a segment of seg_len output
// columns of one output row; lane lp of slice y takes items y * lanes_p * per_lane + lp +
// m * lanes_p, m < per_lane.
struct DirectNhwcRowGrid {
  int lanes_k, lanes_p, groups_k, segs, seg_len, per_lane, slices, items;
};
// rows (N times the output height) x cols output positions, chunks groups of 4 channels, a window
// S wide. Segments per row: the fewest steps a lane walks, per_lane * (seg_len + S - 1 +
// kDirectNhwcItemSteps), when the items spread over kDirectNhwcRowBlocks blocks; short rows or
// small batches cut rows into short segments so the grid still fills the GPU.
inline DirectNhwcRowGrid direct_nhwc_row_grid(int64_t rows, int64_t cols, int64_t chunks, int64_t S) {
  DirectNhwcRowGrid g;
  g.lanes_k = direct_nhwc_lanes_k(chunks);
  g.lanes_p = kDirectNhwcThreads / g.lanes_k;
  g.groups_k = int((chunks + g.lanes_k - 1) / g.lanes_k);
  const int64_t lanes = std::max<int64_t>(1, kDirectNhwcRowBlocks / g.groups_k) * g.lanes_p;
  int64_t best = INT64_MAX;
  g.segs = 1, g.seg_len = int(cols), g.per_lane = 1;
  for (int64_t segs = 1; segs <= std::min<int64_t>(cols, 256); ++segs) {
    const int64_t len = (cols + segs - 1) / segs;
    if ((segs - 1) * len >= cols) continue;  // an empty last segment: the same as fewer segments
    const int64_t per_lane = (rows * segs + lanes - 1) / lanes;
    const int64_t steps = per_lane * (len + S - 1 + kDirectNhwcItemSteps);
    if (steps < best) best = steps, g.segs = int(segs), g.seg_len = int(len), g.per_lane = int(per_lane);
  }
  const int64_t items = rows * g.segs, per_block = int64_t(g.lanes_p) * g.per_lane;
  g.items = int(items);
  g.slices = int((items + per_block - 1) / per_block);
  return g;
}
// The filter gradient's (and the forward pass's) walk over the output (N, P, Q, K).
inline DirectNhwcRowGrid direct_nhwc_row_grid(const Conv2dShape& sh) {
  return direct_nhwc_row_grid(sh.N * sh.P, sh.Q, sh.K / kDirectNhwcRowWidth, sh.S);
}

}  // namespace cnn
