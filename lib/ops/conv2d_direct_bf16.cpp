// Host logic of the direct BF16 convolutions (conv2d_direct_bf16.h), compiled in every build.
#include <algorithm>

#include "ops/conv2d_direct_bf16.h"

namespace cnn {

bool conv2d_direct_bf16_can_implement(const Conv2dShape& sh) {
  if (sh.groups < 1 || sh.C != sh.groups || sh.K % sh.groups != 0 || sh.N < 1 || sh.P < 1 || sh.Q < 1) return false;
  const int64_t limit = 0x7fffffff;
  return sh.N * sh.C * sh.H * sh.W <= limit && sh.N * sh.K * sh.P * sh.Q <= limit;
}

int conv2d_direct_bf16_filter_slices(const Conv2dShape& sh) {
  const int64_t by_work = (sh.N * sh.P * sh.Q + 4095) / 4096, by_blocks = (1024 + sh.K - 1) / sh.K;
  return static_cast<int>(std::max<int64_t>(1, std::min(by_work, by_blocks)));
}

size_t conv2d_direct_bf16_workspace_bytes(const Conv2dShape& sh) {
  return size_t(conv2d_direct_bf16_filter_slices(sh)) * size_t(sh.K * (sh.R * sh.S + 1)) * sizeof(float);
}

}  // namespace cnn
