// The index arithmetic of the BF16 implicit-GEMM convolution (conv2d_igemm_bf16.h), written once
// for the CUDA kernels and for the CPU test that rebuilds each GEMM operand through it
// (tests/ops/test_conv2d_igemm_bf16.cpp): division by run-time constants, and the decoders that
// turn a GEMM column and a reduction index into the tensor offset of the gathered element.
// Trap: an element (red, col) = src[col.off + tap.off] exists only where valid(col, tap); a column
// or tap out of range carries h = kInvalidH, which fails every bounds check, so ragged tiles,
// padding and reduction tails read as zeros without special cases.
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "ops/conv2d.h"

namespace cnn::igemm_bf16_detail {

// n / d and n % d for 0 <= n < 2^31, d >= 1, by one multiply-high (Granlund & Montgomery 1994):
// l = ceil(log2 d), m = floor(2^32 (2^l - d) / d) + 1, q = (mulhi(n, m) + n) >> l.
struct Div {
  uint32_t d = 1, mul = 1, shift = 0;
  Div() = default;
  explicit Div(int64_t divisor) : d(static_cast<uint32_t>(divisor)) {  // host side
    while ((uint64_t{1} << shift) < d) ++shift;
    mul = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  CNN_HD int div(int n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(static_cast<uint32_t>(n), mul);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(n)} * mul) >> 32);
#endif
    return static_cast<int>((hi + static_cast<uint32_t>(n)) >> shift);
  }
  CNN_HD void divmod(int n, int& q, int& r) const {
    q = div(n);
    r = n - q * static_cast<int>(d);
  }
};

// Calls fn(r, s, p, q) for every tap (r, s) through which input pixel (h, w) feeds output (p, q):
// p * stride_h == h + pad_h - r * dilation_h with 0 <= p < P, and the same along w (the transposed
// window of a data gradient, for the direct kernels; d: their parameters).
template <class D, class Fn>
CNN_HD void for_each_data_tap(const D& d, int h, int w, Fn&& fn) {
  for (int r = 0; r < d.R; ++r) {
    const int hp = h + d.ph - r * d.dh;  // p * sh
    if (hp < 0) continue;
    int p, hm;
    d.div_sh.divmod(hp, p, hm);
    if (hm != 0 || p >= d.P) continue;
    for (int s = 0; s < d.S; ++s) {
      const int wq = w + d.pw - s * d.dw;  // q * sw
      if (wq < 0) continue;
      int q, wm;
      d.div_sw.divmod(wq, q, wm);
      if (wm != 0 || q >= d.Q) continue;
      fn(r, s, p, q);
    }
  }
}

// Where one gathered element lives: an offset, the (h, w) it lands on in its plane and, for
// strided data gradients, the residues that must match. A column's and a tap's parts add up.
// A reduction tap also carries rs = r * S + s, its place in the filter window.
struct Tap {
  int off, h, w, rh, rw, rs;
};
// Added to h, keeps every sum with a real tap negative: the element reads as zero.
inline constexpr int kInvalidH = -(1 << 30);
CNN_HD Tap invalid_tap() { return Tap{0, kInvalidH, 0, 0, 0, 0}; }

// Reduction or column crs = (c, r, s) of a gathered x -> the tap (r, s) of channel c relative to
// its window's top-left corner (forward rows, filter-gradient columns).
CNN_HD Tap window_tap(const Div& div_rs, const Div& div_s, int HW, int W, int dh, int dw, int crs) {
  int c, rs, r, s;
  div_rs.divmod(crs, c, rs);
  div_s.divmod(rs, r, s);
  const int dr = r * dh, ds = s * dw;
  return Tap{c * HW + dr * W + ds, dr, ds, 0, 0, rs};
}

// Forward B (C*R*S x N*P*Q) from x: column npq = (n, p, q) -> its window's top-left corner (may be
// padding); reduction crs = (c, r, s) -> the tap inside the window.
struct ForwardDecode {
  Div div_pq, div_q, div_rs, div_s;
  int CHW, HW, H, W, sh, sw, ph, pw, dh, dw;
  static ForwardDecode make(const Conv2dShape& s) {
    return {Div(s.P * s.Q), Div(s.Q), Div(s.R * s.S), Div(s.S), int(s.C * s.H * s.W), int(s.H * s.W), int(s.H),
            int(s.W), s.stride_h, s.stride_w, s.pad_h, s.pad_w, s.dilation_h, s.dilation_w};
  }
  CNN_HD Tap column(int npq) const {
    int n, pq, p, q;
    div_pq.divmod(npq, n, pq);
    div_q.divmod(pq, p, q);
    const int h0 = p * sh - ph, w0 = q * sw - pw;
    return Tap{n * CHW + h0 * W + w0, h0, w0, 0, 0, 0};
  }
  CNN_HD Tap tap(int crs) const { return window_tap(div_rs, div_s, HW, W, dh, dw, crs); }
  CNN_HD bool valid(const Tap& c, const Tap& t) const {
    return unsigned(c.h + t.h) < unsigned(H) && unsigned(c.w + t.w) < unsigned(W);
  }
};

// Data-gradient B (K*R*S x N*H*W) from dy: column nhw = (n, h, w) of dx, reduction krs = (k, r, s):
// dy[n, k, p, q] with p * sh = h + ph - r * dh. Strided: h + ph = hq * sh + hm and
// r * dh = dq * sh + dm, so the tap exists iff hm == dm, at p = hq - dq (the same along w).
struct DataDecode {
  Div div_hw, div_w, div_rs, div_s, div_sh, div_sw;
  int KPQ, PQ, P, Q, sh, sw, ph, pw, dh, dw;
  bool strided;
  static DataDecode make(const Conv2dShape& s) {
    return {Div(s.H * s.W), Div(s.W), Div(s.R * s.S), Div(s.S), Div(s.stride_h), Div(s.stride_w),
            int(s.K * s.P * s.Q), int(s.P * s.Q), int(s.P), int(s.Q), s.stride_h, s.stride_w, s.pad_h, s.pad_w,
            s.dilation_h, s.dilation_w, s.stride_h > 1 || s.stride_w > 1};
  }
  CNN_HD Tap column(int nhw) const {
    int n, hw, h, w;
    div_hw.divmod(nhw, n, hw);
    div_w.divmod(hw, h, w);
    int hq = h + ph, wq = w + pw, hm = 0, wm = 0;
    if (strided) {
      div_sh.divmod(h + ph, hq, hm);
      div_sw.divmod(w + pw, wq, wm);
    }
    return Tap{n * KPQ + hq * Q + wq, hq, wq, hm, wm, 0};
  }
  CNN_HD Tap tap(int krs) const {
    int k, rs, r, s;
    div_rs.divmod(krs, k, rs);
    div_s.divmod(rs, r, s);
    int dq = r * dh, eq = s * dw, dm = 0, em = 0;
    if (strided) {
      div_sh.divmod(r * dh, dq, dm);
      div_sw.divmod(s * dw, eq, em);
    }
    return Tap{k * PQ - dq * Q - eq, -dq, -eq, dm, em, rs};
  }
  CNN_HD bool valid(const Tap& c, const Tap& t) const {
    const bool in = unsigned(c.h + t.h) < unsigned(P) && unsigned(c.w + t.w) < unsigned(Q);
    return in && (!strided || (c.rh == t.rh && c.rw == t.rw));
  }
};

// Whether an element of a gathered forward or data-gradient operand exists depends on its column
// and on the window place rs of its tap only (not on the channel): bit rs of masks[j] says it for
// column cols[j] (0 for a column past the end), so a kernel tests one bit per element. The tap of
// each place is decoded once for all columns. Needs R*S <= 32.
inline constexpr int kMaxMaskTaps = 32;
template <int kCols, class Decode>
CNN_HD void window_masks(const Decode& dec, const Tap (&cols)[kCols], uint32_t (&masks)[kCols]) {
  for (int j = 0; j < kCols; ++j) masks[j] = 0;
  for (int rs = 0; rs < static_cast<int>(dec.div_rs.d); ++rs) {
    const Tap t = dec.tap(rs);
    for (int j = 0; j < kCols; ++j)
      if (dec.valid(cols[j], t)) masks[j] |= 1u << rs;
  }
}

// Filter gradient: A (K x N*P*Q) = dy at n*KPQ + k*PQ + p*Q + q; B (C*R*S x N*P*Q) = x gathered,
// column crs = (c, r, s) -> the tap, reduction npq -> the window corner. Kernels walk the reduction
// position by position (Walk) instead of dividing for each element.
struct FilterDecode {
  Div div_pq, div_q, div_rs, div_s;
  int KPQ, PQ, P, Q, CHW, HW, H, W, sh, sw, ph, pw, dh, dw;
  static FilterDecode make(const Conv2dShape& s) {
    return {Div(s.P * s.Q), Div(s.Q), Div(s.R * s.S), Div(s.S), int(s.K * s.P * s.Q), int(s.P * s.Q), int(s.P),
            int(s.Q), int(s.C * s.H * s.W), int(s.H * s.W), int(s.H), int(s.W), s.stride_h, s.stride_w, s.pad_h,
            s.pad_w, s.dilation_h, s.dilation_w};
  }
  struct Walk {
    int n, p, q;
  };
  CNN_HD Walk start(int npq) const {
    Walk w;
    int pq;
    div_pq.divmod(npq, w.n, pq);
    div_q.divmod(pq, w.p, w.q);
    return w;
  }
  CNN_HD void next(Walk& w) const {  // without branches: selects, not divergent code in the kernels
    const bool row_end = w.q + 1 == Q;
    w.q = row_end ? 0 : w.q + 1;
    const bool image_end = row_end && w.p + 1 == P;
    w.p = image_end ? 0 : w.p + row_end;
    w.n += image_end;
  }
  CNN_HD Tap column(int crs) const { return window_tap(div_rs, div_s, HW, W, dh, dw, crs); }
  CNN_HD Tap corner(const Walk& w) const {  // the window corner of output position w in x
    const int h0 = w.p * sh - ph, w0 = w.q * sw - pw;
    return Tap{w.n * CHW + h0 * W + w0, h0, w0, 0, 0, 0};
  }
  CNN_HD int dy_offset(const Walk& w) const { return w.n * KPQ + w.p * Q + w.q; }  // + k * PQ
  CNN_HD bool valid(const Tap& c, const Tap& t) const {
    return unsigned(c.h + t.h) < unsigned(H) && unsigned(c.w + t.w) < unsigned(W);
  }
};

}  // namespace cnn::igemm_bf16_detail
