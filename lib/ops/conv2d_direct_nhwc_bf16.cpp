// Host logic of the direct NHWC BF16 convolutions (conv2d_direct_nhwc_bf16.h), compiled in every
// build: which shapes they take and the filter gradient's slices and workspace.
#include "ops/conv2d_direct_nhwc_bf16.h"

#include <algorithm>

#include "ops/conv2d_direct_nhwc_bf16_layout.h"

namespace cnn {

bool conv2d_direct_nhwc_bf16_can_implement(const Conv2dShape& sh) {
  if (sh.groups < 1 || sh.C != sh.groups || sh.K % sh.groups != 0 || sh.N < 1 || sh.P < 1 || sh.Q < 1) return false;
  const int64_t limit = 0x7fffffff;
  return sh.N * sh.C * sh.H * sh.W <= limit && sh.N * sh.K * sh.P * sh.Q <= limit && sh.K * sh.R * sh.S <= limit;
}

int conv2d_direct_nhwc_bf16_filter_slices(const Conv2dShape& sh) {
  const DirectNhwcFilterGrid g = direct_nhwc_filter_grid(sh, direct_nhwc_channel_width(sh));
  return g.slices;
}

size_t conv2d_direct_nhwc_bf16_workspace_bytes(const Conv2dShape& sh) {
  return size_t(conv2d_direct_nhwc_bf16_filter_slices(sh)) * size_t(sh.K) * size_t(sh.R * sh.S + 1) * sizeof(float);
}

}  // namespace cnn
