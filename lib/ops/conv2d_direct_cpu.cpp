// Direct convolution on the CPU for filters that read one input channel (C/groups == 1: depthwise
// with any channel multiplier, and C == 1 first layers): the "cpu:direct" rows, and what the "cpu"
// default rows run for depthwise shapes (conv2d_cpu_direct_is_default). No columns, no workspace.
// Stride 1: each plane is copied once into a zero-padded "wide" plane (rows of Wp = W + padding), so
// every tap is one contiguous multiply-add over the whole plane (P * Wp values), the extra columns
// computed and dropped: small planes (6x6 in mini_xception) run as long loops too. Other strides:
// each output row is a sum of shifted input rows times one tap. The loops are built for AVX-512 and
// AVX2 too (target_clones; the CPU picks at load time).
// Trap: forward adds in the reference's order (bias, then taps r-major); on the stride-1 path the
// padded taps add w * 0, so y equals the float reference up to the sign of a zero (and an infinite
// weight makes NaN at the border). dx and dw sum in another order (dw in double per filter tap),
// within kFastCpuVsReference. dw and db are each written by one thread per filter: thread-count
// independent. Scratch (the wide planes) is host memory of the call, threads x 2 planes.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "ops/conv2d.h"

namespace cnn {

bool conv2d_cpu_direct_can_implement(const Conv2dShape& sh) {
  return sh.groups >= 1 && sh.C % sh.groups == 0 && sh.K % sh.groups == 0 && sh.C / sh.groups == 1 && sh.P >= 1 &&
         sh.Q >= 1;
}

bool conv2d_cpu_direct_is_default(const Conv2dShape& sh) {
  return conv2d_cpu_direct_can_implement(sh) && sh.groups > 1;
}

static void check_direct(const Conv2dShape& sh) {
  CNN_CHECK(conv2d_cpu_direct_can_implement(sh),
            "conv2d cpu:direct: needs filters that read one input channel (C/groups == 1), got {}", sh.to_string());
}

namespace {

// The outputs q in [lo, hi) of one row whose input column q * stride + off lies in [0, W).
struct Span {
  int64_t lo, hi;
};
Span valid_columns(const Conv2dShape& sh, int64_t off) {
  const int64_t sw = sh.stride_w;
  const int64_t lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
  const int64_t hi = sh.W - 1 - off < 0 ? 0 : std::min<int64_t>(sh.Q, (sh.W - 1 - off) / sw + 1);
  return {lo, std::max(lo, hi)};
}

// The column spans of every tap s of a row (they depend on s only).
std::vector<Span> tap_spans(const Conv2dShape& sh) {
  std::vector<Span> spans(size_t(sh.S));
  for (int64_t s = 0; s < sh.S; ++s) spans[size_t(s)] = valid_columns(sh, s * sh.dilation_w - sh.pad_w);
  return spans;
}

// y_row[q] += w * x_row[q * stride + off] over the span.
inline void axpy_row(float* y, const float* x, float w, Span sp, int64_t stride, int64_t off) {
  if (stride == 1) {
    const float* xs = x + off;
#pragma omp simd
    for (int64_t q = sp.lo; q < sp.hi; ++q) y[q] += w * xs[q];
  } else {
    for (int64_t q = sp.lo; q < sp.hi; ++q) y[q] += w * x[q * stride + off];
  }
}

// One output plane: y (P, Q) = b + sum over taps of w (R, S) times the shifted plane x (H, W).
void forward_plane(const Conv2dShape& sh, const std::vector<Span>& spans, const float* x, const float* w, float bias,
                   float* y) {
  for (int64_t p = 0; p < sh.P; ++p) {
    float* yr = y + p * sh.Q;
    std::fill(yr, yr + sh.Q, bias);
    for (int64_t r = 0; r < sh.R; ++r) {
      const int64_t ih = p * sh.stride_h - sh.pad_h + r * sh.dilation_h;
      if (ih < 0 || ih >= sh.H) continue;
      const float* xr = x + ih * sh.W;
      for (int64_t s = 0; s < sh.S; ++s)
        axpy_row(yr, xr, w[r * sh.S + s], spans[size_t(s)], sh.stride_w, s * sh.dilation_w - sh.pad_w);
    }
  }
}

// One input plane's share from one filter: dx (H, W) += the taps of w scattered from dy (P, Q).
void backward_data_plane(const Conv2dShape& sh, const std::vector<Span>& spans, const float* dy, const float* w,
                         float* dx) {
  for (int64_t p = 0; p < sh.P; ++p) {
    const float* dyr = dy + p * sh.Q;
    for (int64_t r = 0; r < sh.R; ++r) {
      const int64_t ih = p * sh.stride_h - sh.pad_h + r * sh.dilation_h;
      if (ih < 0 || ih >= sh.H) continue;
      float* dxr = dx + ih * sh.W;
      for (int64_t s = 0; s < sh.S; ++s) {
        const Span sp = spans[size_t(s)];
        const int64_t off = s * sh.dilation_w - sh.pad_w;
        const float wv = w[r * sh.S + s];
        if (sh.stride_w == 1) {
          float* d = dxr + off;
#pragma omp simd
          for (int64_t q = sp.lo; q < sp.hi; ++q) d[q] += wv * dyr[q];
        } else {
          for (int64_t q = sp.lo; q < sp.hi; ++q) dxr[q * sh.stride_w + off] += wv * dyr[q];
        }
      }
    }
  }
}

// sum over q in the span of dy_row[q] * x_row[q * stride + off].
inline float dot_row(const float* dy, const float* x, Span sp, int64_t stride, int64_t off) {
  float acc = 0.0f;
  if (stride == 1) {
    const float* xs = x + off;
#pragma omp simd reduction(+ : acc)
    for (int64_t q = sp.lo; q < sp.hi; ++q) acc += dy[q] * xs[q];
  } else {
    for (int64_t q = sp.lo; q < sp.hi; ++q) acc += dy[q] * x[q * stride + off];
  }
  return acc;
}

// ---- stride 1: wide planes ----

#define CNN_SIMD_CLONES __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))

// y (n) += a * x (n).
CNN_SIMD_CLONES void axpy(float* y, const float* x, float a, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
// sum of a (n) * b (n), in float lanes.
CNN_SIMD_CLONES float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// Wide planes of Wp = W + 2 pad_w columns: the input zero-padded (Hp = H + 2 pad_h rows, plus the
// last tap's overhang), the output P rows of Wp (columns Q.. computed and dropped). Output i reads
// input i + offset(t) for tap t.
struct Wide {
  int64_t Wp, in_size, out_size;
  std::vector<int64_t> offset;  // (R * S)
  explicit Wide(const Conv2dShape& sh) : Wp(sh.W + 2 * sh.pad_w) {
    in_size = (sh.H + 2 * sh.pad_h) * Wp + (sh.S - 1) * sh.dilation_w;
    out_size = sh.P * Wp;
    for (int64_t r = 0; r < sh.R; ++r)
      for (int64_t s = 0; s < sh.S; ++s) offset.push_back(r * sh.dilation_h * Wp + s * sh.dilation_w);
  }
  // x (H, W) into xw (in_size), zeros around it.
  void load_input(const Conv2dShape& sh, const float* x, float* xw) const {
    std::fill(xw, xw + in_size, 0.0f);
    for (int64_t h = 0; h < sh.H; ++h) std::copy(x + h * sh.W, x + (h + 1) * sh.W, xw + (h + sh.pad_h) * Wp + sh.pad_w);
  }
  // dy (P, Q) into dyw (out_size), the extra columns zero.
  void load_output(const Conv2dShape& sh, const float* dy, float* dyw) const {
    for (int64_t p = 0; p < sh.P; ++p) {
      std::copy(dy + p * sh.Q, dy + (p + 1) * sh.Q, dyw + p * Wp);
      std::fill(dyw + p * Wp + sh.Q, dyw + (p + 1) * Wp, 0.0f);
    }
  }
};

bool wide_path(const Conv2dShape& sh) { return sh.stride_h == 1 && sh.stride_w == 1; }

// Per-thread scratch of the wide path: two planes a thread.
struct WideScratch {
  std::vector<float> floats;
  int64_t per_thread;
  WideScratch(const Wide& wide, int threads) : per_thread(wide.in_size + wide.out_size) {
    floats.resize(size_t(per_thread * threads));
  }
  float* in(int t) { return floats.data() + t * per_thread; }
  float* out(int t, const Wide& wide) { return in(t) + wide.in_size; }
};

void forward_plane_wide(const Conv2dShape& sh, const Wide& wide, const float* x, const float* w, float bias, float* y,
                        float* xw, float* yw) {
  wide.load_input(sh, x, xw);
  std::fill(yw, yw + wide.out_size, bias);
  for (size_t t = 0; t < wide.offset.size(); ++t) axpy(yw, xw + wide.offset[t], w[t], wide.out_size);
  for (int64_t p = 0; p < sh.P; ++p) std::copy(yw + p * wide.Wp, yw + p * wide.Wp + sh.Q, y + p * sh.Q);
}

}  // namespace

void conv2d_forward_cpu_direct(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                               const float* b, float* y) {
  check_direct(sh);
  CNN_CHECK(!sh.has_bias || b, "conv2d: the shape has a bias but b is null");
  const int64_t Kg = sh.K / sh.groups, HW = sh.H * sh.W, PQ = sh.P * sh.Q, RS = sh.R * sh.S;
  const std::vector<Span> spans = tap_spans(sh);
  const int64_t planes = sh.N * sh.K;
  const int threads = ctx.threads();
  const Wide wide(sh);
  WideScratch scratch(wide, wide_path(sh) ? threads : 0);
#pragma omp parallel for num_threads(threads) schedule(static) if (planes * PQ * RS >= (int64_t{1} << 15))
  for (int64_t nk = 0; nk < planes; ++nk) {
    const int64_t n = nk / sh.K, k = nk % sh.K;
    const float* xp = x + (n * sh.C + k / Kg) * HW;
    const float bias = sh.has_bias ? b[k] : 0.0f;
    if (!wide_path(sh)) {
      forward_plane(sh, spans, xp, w + k * RS, bias, y + nk * PQ);
      continue;
    }
    const int t = omp_get_thread_num();
    forward_plane_wide(sh, wide, xp, w + k * RS, bias, y + nk * PQ, scratch.in(t), scratch.out(t, wide));
  }
}

void conv2d_backward_cpu_direct(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                const float* dy, float* dx, float* dw, float* db) {
  check_direct(sh);
  const int64_t Kg = sh.K / sh.groups, HW = sh.H * sh.W, PQ = sh.P * sh.Q, RS = sh.R * sh.S;
  const std::vector<Span> spans = tap_spans(sh);
  const bool big = sh.N * sh.K * PQ * RS >= (int64_t{1} << 15);
  const int threads = ctx.threads();
  const Wide wide(sh);
  WideScratch scratch(wide, wide_path(sh) ? threads : 0);
  if (dx) {
    // Input plane (n, c) gathers from its Kg filters, in filter order.
    const int64_t planes = sh.N * sh.C;
#pragma omp parallel for num_threads(threads) schedule(static) if (big)
    for (int64_t nc = 0; nc < planes; ++nc) {
      const int64_t n = nc / sh.C, c = nc % sh.C;
      float* dxp = dx + nc * HW;
      if (!wide_path(sh)) {
        std::fill(dxp, dxp + HW, 0.0f);
        for (int64_t k = c * Kg; k < (c + 1) * Kg; ++k)
          backward_data_plane(sh, spans, dy + (n * sh.K + k) * PQ, w + k * RS, dxp);
        continue;
      }
      const int t = omp_get_thread_num();
      float *dxw = scratch.in(t), *dyw = scratch.out(t, wide);
      std::fill(dxw, dxw + wide.in_size, 0.0f);
      for (int64_t k = c * Kg; k < (c + 1) * Kg; ++k) {
        wide.load_output(sh, dy + (n * sh.K + k) * PQ, dyw);
        for (size_t i = 0; i < wide.offset.size(); ++i) axpy(dxw + wide.offset[i], dyw, w[k * RS + int64_t(i)], wide.out_size);
      }
      for (int64_t h = 0; h < sh.H; ++h) {
        const float* row = dxw + (h + sh.pad_h) * wide.Wp + sh.pad_w;
        std::copy(row, row + sh.W, dxp + h * sh.W);
      }
    }
  }
  if (dw || db) {
#pragma omp parallel for num_threads(threads) schedule(static) if (big)
    for (int64_t k = 0; k < sh.K; ++k) {
      const int64_t c = k / Kg;
      if (db) db[k] = conv2d_bias_gradient_cpu(sh, dy, k);
      if (!dw) continue;
      if (wide_path(sh)) {
        const int th = omp_get_thread_num();
        float *xw = scratch.in(th), *dyw = scratch.out(th, wide);
        const size_t taps = wide.offset.size();
        double sums[64];
        for (size_t t0 = 0; t0 < taps; t0 += 64) {  // 64 taps at a time (a 3x3 filter has 9)
          const size_t t1 = std::min(taps, t0 + 64);
          std::fill(sums, sums + (t1 - t0), 0.0);
          for (int64_t n = 0; n < sh.N; ++n) {
            wide.load_input(sh, x + (n * sh.C + c) * HW, xw);
            wide.load_output(sh, dy + (n * sh.K + k) * PQ, dyw);
            for (size_t t = t0; t < t1; ++t) sums[t - t0] += dot(dyw, xw + wide.offset[t], wide.out_size);
          }
          for (size_t t = t0; t < t1; ++t) dw[k * RS + int64_t(t)] = static_cast<float>(sums[t - t0]);
        }
        continue;
      }
      double acc[64];  // one per tap when R*S <= 64; larger windows sum tap by tap below
      const bool all_taps = RS <= 64;
      for (int64_t t0 = 0; t0 < RS; t0 += all_taps ? RS : 1) {
        const int64_t t1 = all_taps ? RS : t0 + 1;
        std::fill(acc, acc + (t1 - t0), 0.0);
        for (int64_t n = 0; n < sh.N; ++n) {
          const float* xp = x + (n * sh.C + c) * HW;
          const float* dyp = dy + (n * sh.K + k) * PQ;
          for (int64_t p = 0; p < sh.P; ++p)
            for (int64_t t = t0; t < t1; ++t) {
              const int64_t r = t / sh.S, s = t % sh.S;
              const int64_t ih = p * sh.stride_h - sh.pad_h + r * sh.dilation_h;
              if (ih < 0 || ih >= sh.H) continue;
              acc[t - t0] += dot_row(dyp + p * sh.Q, xp + ih * sh.W, spans[size_t(s)], sh.stride_w,
                                     s * sh.dilation_w - sh.pad_w);
            }
        }
        for (int64_t t = t0; t < t1; ++t) dw[k * RS + t] = static_cast<float>(acc[t - t0]);
      }
    }
  }
}

}  // namespace cnn
