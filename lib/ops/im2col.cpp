// im2col / col2im (see im2col.h). Per kernel tap the valid output columns form one interval
// [q_lo, q_hi), computed once, so the inner loops carry no bounds tests.
#include "ops/im2col.h"

#include <algorithm>
#include <cstring>

#include "ops/simd_clones.h"

namespace cnn {

// Output columns q whose input column q*stride - pad + offset lies in [0, W).
static void valid_range(int64_t W, int64_t Q, int stride, int64_t shift, int64_t& lo, int64_t& hi) {
  // shift = offset - pad; need 0 <= q*stride + shift <= W-1.
  lo = shift >= 0 ? 0 : (-shift + stride - 1) / stride;
  hi = W - 1 - shift < 0 ? 0 : (W - 1 - shift) / stride + 1;
  lo = std::min(lo, Q);
  hi = std::max(lo, std::min(hi, Q));
}

void im2col_cpu(const Conv2dShape& sh, const float* x, int64_t channels, int64_t p_begin, int64_t p_end, float* col) {
  const int64_t H = sh.H, W = sh.W, Q = sh.Q;
  for (int64_t c = 0; c < channels; ++c) {
    const float* xc = x + c * H * W;
    for (int64_t r = 0; r < sh.R; ++r) {
      for (int64_t s = 0; s < sh.S; ++s) {
        int64_t q_lo, q_hi;
        valid_range(W, Q, sh.stride_w, s * sh.dilation_w - sh.pad_w, q_lo, q_hi);
        const int64_t iw0 = q_lo * sh.stride_w + s * sh.dilation_w - sh.pad_w;
        for (int64_t p = p_begin; p < p_end; ++p, col += Q) {
          const int64_t ih = p * sh.stride_h + r * sh.dilation_h - sh.pad_h;
          if (ih < 0 || ih >= H) {
            std::memset(col, 0, static_cast<size_t>(Q) * sizeof(float));
            continue;
          }
          std::fill(col, col + q_lo, 0.0f);
          if (q_hi > q_lo) {
            const float* src = xc + ih * W + iw0;
            if (sh.stride_w == 1) {
              std::memcpy(col + q_lo, src, static_cast<size_t>(q_hi - q_lo) * sizeof(float));
            } else {
              for (int64_t q = q_lo; q < q_hi; ++q, src += sh.stride_w) col[q] = *src;
            }
          }
          std::fill(col + q_hi, col + Q, 0.0f);
        }
      }
    }
  }
}

CNN_SIMD_CLONES void col2im_cpu(const Conv2dShape& sh, const float* col, int64_t channels, int64_t p_begin,
                                int64_t p_end, float* x) {
  const int64_t H = sh.H, W = sh.W, Q = sh.Q;
  for (int64_t c = 0; c < channels; ++c) {
    float* xc = x + c * H * W;
    for (int64_t r = 0; r < sh.R; ++r) {
      for (int64_t s = 0; s < sh.S; ++s) {
        int64_t q_lo, q_hi;
        valid_range(W, Q, sh.stride_w, s * sh.dilation_w - sh.pad_w, q_lo, q_hi);
        const int64_t iw0 = q_lo * sh.stride_w + s * sh.dilation_w - sh.pad_w;
        for (int64_t p = p_begin; p < p_end; ++p, col += Q) {
          const int64_t ih = p * sh.stride_h + r * sh.dilation_h - sh.pad_h;
          if (ih < 0 || ih >= H || q_hi == q_lo) continue;
          float* dst = xc + ih * W + iw0;
          if (sh.stride_w == 1) {
            for (int64_t q = q_lo; q < q_hi; ++q) dst[q - q_lo] += col[q];
          } else {
            for (int64_t q = q_lo; q < q_hi; ++q, dst += sh.stride_w) *dst += col[q];
          }
        }
      }
    }
  }
}

}  // namespace cnn
