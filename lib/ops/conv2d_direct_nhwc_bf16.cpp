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

bool conv2d_direct_nhwc_bf16_rows_can_implement(const Conv2dShape& sh, ConvDir dir) {
  return conv2d_direct_nhwc_bf16_can_implement(sh) &&
         (dir == ConvDir::backward_data ? direct_nhwc_rows_data_shape(sh) : direct_nhwc_rows_shape(sh));
}

int conv2d_direct_nhwc_bf16_filter_slices(const Conv2dShape& sh, DirectNhwcKernel kernel) {
  const bool rows =
      kernel == DirectNhwcKernel::rows || (kernel == DirectNhwcKernel::automatic && direct_nhwc_rows_shape(sh));
  // The pixels kernel's slices do not depend on its width (the scalar fallback shares them).
  return rows ? direct_nhwc_row_grid(sh).slices : direct_nhwc_filter_grid(sh, direct_nhwc_channel_width(sh)).slices;
}

size_t conv2d_direct_nhwc_bf16_workspace_bytes(const Conv2dShape& sh) {
  int slices = conv2d_direct_nhwc_bf16_filter_slices(sh, DirectNhwcKernel::pixels);
  if (direct_nhwc_rows_shape(sh)) slices = std::max(slices, conv2d_direct_nhwc_bf16_filter_slices(sh));
  return size_t(slices) * size_t(sh.K) * size_t(sh.R * sh.S + 1) * sizeof(float);
}

}  // namespace cnn
