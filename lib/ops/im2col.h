// im2col / col2im for one image and a block of channels (one conv group), CPU.
// Trap: col2im accumulates (overlapping windows add up), so the caller zeroes x first; rows of the
// column matrix are ordered (c, r, s) to match the weight layout (K, C/groups, R, S).
#pragma once

#include <cstdint>

#include "ops/conv2d.h"

namespace cnn {

// Output rows [p_begin, p_end) of the column matrix, L = (p_end - p_begin) * Q columns: a block
// of the whole (P * Q columns) that a caller can keep in cache.
// x (channels, H, W) -> col (channels*R*S, L); padded taps are written as zeros.
void im2col_cpu(const Conv2dShape& sh, const float* x, int64_t channels, int64_t p_begin, int64_t p_end, float* col);
// col (channels*R*S, L) added into x (channels, H, W); padded taps are dropped.
void col2im_cpu(const Conv2dShape& sh, const float* col, int64_t channels, int64_t p_begin, int64_t p_end, float* x);

}  // namespace cnn
