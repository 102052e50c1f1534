// The index arithmetic of the NHWC BF16 implicit GEMM (conv2d_igemm_nhwc_bf16.h), written once for
// the CUDA kernels and the CPU test that rebuilds every GEMM operand through it: a gathered element
// (row m, reduction red) is src[row.off + tap.off] where valid(row, tap), else zero.
//   forward          row m = (n, p, q) of y, tap red = (r, s, c): x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c]
//   backward_data    row m = (n, h, w) of dx, tap red = (r, s, k): dy[n, p, q, k] with
//                    p*sh = h + ph - r*dh: h + ph = hq*sh + hm and r*dh = dq*sh + dm, so the tap
//                    exists iff hm == dm (the residues, packed with w's into `res`), at p = hq - dq
//   backward_filter  B(column (r, s, c), reduction npq) is the forward element (row npq, tap crs)
// Trap: offsets are int32 (can_implement keeps tensors under 2^31 elements); a padded row's offset
// may be negative, but only valid (in-image) sums are ever dereferenced.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "ops/conv2d.h"
#include "ops/conv2d_igemm_bf16_decode.h"

namespace cnn::igemm_nhwc_bf16_detail {

using igemm_bf16_detail::Div;

// A GEMM row's window origin (h, w) in the source image and its offset; a tap's displacement.
struct NhwcPos {
  int off, h, w, res;
};
inline constexpr int kNhwcInvalidH = -(1 << 30);  // added to a tap's h, fails every bounds check
CNN_HD NhwcPos nhwc_invalid_row() { return NhwcPos{0, kNhwcInvalidH, 0, 0}; }

struct NhwcGather {
  Div div_img, div_wo, div_c, div_s, div_sh, div_sw;  // row image size and width; source channels; S; strides
  int Hs, Ws, Cs;                                     // the gathered tensor's H, W, C
  int sh, sw, ph, pw, dh, dw;
  bool data;  // backward data: the rows are dx pixels gathering dy

  // forward (x gathered for y's pixels; also the filter gradient's B operand)
  static NhwcGather forward(const Conv2dShape& s) {
    return {Div(s.P * s.Q), Div(s.Q),   Div(s.C),   Div(s.S), Div(1),  Div(1),       int(s.H),     int(s.W),
            int(s.C),       s.stride_h, s.stride_w, s.pad_h,  s.pad_w, s.dilation_h, s.dilation_w, false};
  }
  // backward data (dy gathered for dx's pixels)
  static NhwcGather backward_data(const Conv2dShape& s) {
    return {Div(s.H * s.W), Div(s.W),   Div(s.K),   Div(s.S), Div(s.stride_h), Div(s.stride_w), int(s.P),     int(s.Q),
            int(s.K),       s.stride_h, s.stride_w, s.pad_h,  s.pad_w,         s.dilation_h,    s.dilation_w, true};
  }

  // Row m's window origin and offset; kData: backward data (the kernels know it at compile time).
  template <bool kData>
  CNN_HD NhwcPos row_as(int m) const {
    int n, hw, a, b;
    div_img.divmod(m, n, hw);
    div_wo.divmod(hw, a, b);
    if (!kData) {
      const int h = a * sh - ph, w = b * sw - pw;
      return NhwcPos{((n * Hs + h) * Ws + w) * Cs, h, w, 0};
    }
    int hq, hm, wq, wm;
    div_sh.divmod(a + ph, hq, hm);
    div_sw.divmod(b + pw, wq, wm);
    return NhwcPos{((n * Hs + hq) * Ws + wq) * Cs, hq, wq, hm * sw + wm};
  }
  // Reduction index red = (r * S + s) * Cs + c -> the tap's displacement and offset.
  template <bool kData>
  CNN_HD NhwcPos tap_as(int red) const {
    int rs, c, r, s;
    div_c.divmod(red, rs, c);
    div_s.divmod(rs, r, s);
    if (!kData) {
      const int th = r * dh, tw = s * dw;
      return NhwcPos{(th * Ws + tw) * Cs + c, th, tw, 0};
    }
    int dq, dm, eq, em;
    div_sh.divmod(r * dh, dq, dm);
    div_sw.divmod(s * dw, eq, em);
    return NhwcPos{-(dq * Ws + eq) * Cs + c, -dq, -eq, dm * sw + em};
  }
  template <bool kData>
  CNN_HD bool valid_as(const NhwcPos& row, const NhwcPos& tap) const {
    const bool in = unsigned(row.h + tap.h) < unsigned(Hs) && unsigned(row.w + tap.w) < unsigned(Ws);
    return kData ? in && row.res == tap.res : in;
  }
  CNN_HD NhwcPos row(int m) const { return data ? row_as<true>(m) : row_as<false>(m); }
  CNN_HD NhwcPos tap(int red) const { return data ? tap_as<true>(red) : tap_as<false>(red); }
  CNN_HD bool valid(const NhwcPos& row, const NhwcPos& tap) const {
    return data ? valid_as<true>(row, tap) : valid_as<false>(row, tap);
  }
};

}  // namespace cnn::igemm_nhwc_bf16_detail
