// Direct convolution on the CPU for filters that read one input channel (C/groups == 1: depthwise
// with any channel multiplier, and C == 1 first layers): the "cpu:direct" rows, and what the "cpu"
// default rows run for depthwise shapes (conv2d_cpu_direct_is_default). No columns, no workspace.
// Stride 1: each plane is copied once into a zero-padded "wide" plane (rows of Wp = W + padding), so
// every tap is one contiguous multiply-add over the whole plane (P * Wp values), the extra columns
// computed and dropped: small planes (6x6 in mini_xception) run as long loops too. Other strides:
// each output row is a sum of shifted input rows times one tap. The loops are built for AVX-512 and
// AVX2 too (ops/simd_clones.h; the CPU picks at load time).
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
#include "ops/simd_clones.h"

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


// The stride-1 kernels walk a plane in blocks of kLanes outputs and apply every tap to a block
// while it sits in registers: one pass over the plane instead of one per tap (a 3x3 filter made
// 9 passes, each reloading and storing the partial sums; on 6x6 planes the calls cost more than
// the math). Sums run in the same order as a tap-by-tap pass (bias, then taps in order).
constexpr int64_t kLanes = 16;
constexpr size_t kMaxTaps = 64;  // the filter gradient's tap block (a 3x3 filter has 9)

constexpr int64_t kFlushBlocks = 256;

int64_t round_up(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// One block of kLanes floats as a GCC vector: the AVX-512 clone keeps it in one register, the
// others in two or four; loads and stores through memcpy are unaligned moves.
#pragma GCC diagnostic ignored "-Wpsabi"  // Block in inline helpers: no ABI crosses a call
typedef float Block __attribute__((vector_size(kLanes * sizeof(float))));
inline Block load(const float* p) {
  Block b;
  __builtin_memcpy(&b, p, sizeof(b));
  return b;
}
inline void store(float* p, Block b) { __builtin_memcpy(p, &b, sizeof(b)); }

// TAPS > 0: the tap count known at compile time (loops unrolled, sums in registers); 0: `taps`.
// y (n, rounded up to kLanes) = bias + sum over taps t of w[t] * x[i + off[t]].
template <size_t TAPS>
CNN_SIMD_CLONES void taps_forward(float* y, const float* x, const int64_t* off, const float* w, size_t taps,
                                  float bias, int64_t n) {
  if (TAPS) taps = TAPS;
  for (int64_t i = 0; i < n; i += kLanes) {
    Block acc = Block{} + bias;
    #pragma GCC unroll 16
    for (size_t t = 0; t < taps; ++t) acc += w[t] * load(x + off[t] + i);
    store(y + i, acc);
  }
}

// dx (n, rounded up) (+)= sum over taps t of w[t] * dy[i - off[t]]: the transposed taps, gathered
// (dy readable from off[max] before its first element). Adds to dx unless `first`.
template <size_t TAPS>
CNN_SIMD_CLONES void taps_backward_data(float* dx, const float* dy, const int64_t* off, const float* w, size_t taps,
                                        bool first, int64_t n) {
  if (TAPS) taps = TAPS;
  for (int64_t i = 0; i < n; i += kLanes) {
    Block acc = first ? Block{} : load(dx + i);
    #pragma GCC unroll 16
    for (size_t t = 0; t < taps; ++t) acc += w[t] * load(dy + i - off[t]);
    store(dx + i, acc);
  }
}

// lanes[t] += the kLanes partial sums over i < n (rounded up) of dy[i] * x[i + off[t]], t < taps
// <= kMaxTaps (lanes: (taps, kLanes) floats); the caller adds them up in double now and then.
template <size_t TAPS>
CNN_SIMD_CLONES void taps_backward_filter(float* lanes, const float* dy, const float* x, const int64_t* off,
                                          size_t taps, int64_t n) {
  if (TAPS) taps = TAPS;
  Block acc[TAPS ? TAPS : kMaxTaps];
#pragma GCC unroll 16
  for (size_t t = 0; t < taps; ++t) acc[t] = Block{};
  for (int64_t i = 0; i < n; i += kLanes) {
    const Block d = load(dy + i);
#pragma GCC unroll 16
    for (size_t t = 0; t < taps; ++t) acc[t] += d * load(x + off[t] + i);
  }
#pragma GCC unroll 16
  for (size_t t = 0; t < taps; ++t) store(lanes + t * kLanes, load(lanes + t * kLanes) + acc[t]);
}

// sums[t] += the lanes of tap t, in double; the lanes start again from zero.
void flush_lanes(double* sums, float* lanes, size_t taps) {
  for (size_t t = 0; t < taps; ++t) {
    double total = 0.0;
    for (int64_t l = 0; l < kLanes; ++l) total += lanes[t * kLanes + l];
    sums[t] += total;
  }
  std::fill(lanes, lanes + taps * kLanes, 0.0f);
}

// dst row r (dst_stride apart) = src row r (src_stride apart, cols values) followed by `zeros`
// zeros, for rows rows. One call a plane: on 6x6 planes a memcpy and a memset a row cost more than
// the convolution.
CNN_SIMD_CLONES void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                               int64_t cols, int64_t zeros) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * src_stride;
    float* d = dst + r * dst_stride;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) d[c] = s[c];
#pragma omp simd
    for (int64_t c = 0; c < zeros; ++c) d[cols + c] = 0.0f;
  }
}

// Wide planes of Wp = W + 2 pad_w columns: the input zero-padded (Hp = H + 2 pad_h rows), the
// output P rows of Wp (columns Q.. computed and dropped), both with room for the last block of
// kLanes. Output i reads input i + offset(t) for tap t. The output plane sits `margin` (the
// largest offset) floats into its buffer, zeros before it, so the data gradient can gather.
struct Wide {
  int64_t Wp, in_size, out_size, out_rounded, margin;
  std::vector<int64_t> offset;  // (R * S)
  explicit Wide(const Conv2dShape& sh) : Wp(sh.W + 2 * sh.pad_w) {
    for (int64_t r = 0; r < sh.R; ++r)
      for (int64_t s = 0; s < sh.S; ++s) offset.push_back(r * sh.dilation_h * Wp + s * sh.dilation_w);
    margin = offset.back();
    out_size = sh.P * Wp;
    out_rounded = round_up(out_size);
    in_size = std::max((sh.H + 2 * sh.pad_h) * Wp, margin + out_rounded) + kLanes + sh.pad_w;  // load_input's last zeros
  }
  int64_t out_buffer() const { return margin + out_rounded + margin + kLanes; }
  // x (H, W) into xw (in_size), zeros around it.
  void load_input(const Conv2dShape& sh, const float* x, float* xw) const {
    const int64_t top = sh.pad_h * Wp, right = Wp - sh.pad_w - sh.W;
    std::fill(xw, xw + top + sh.pad_w, 0.0f);
    // Each row's right padding and the next row's left padding; the last row's runs into the
    // bottom rows, zeroed after it.
    copy_rows(x, sh.W, xw + top + sh.pad_w, Wp, sh.H, sh.W, right + sh.pad_w);
    std::fill(xw + top + sh.H * Wp, xw + in_size, 0.0f);
  }
  // dy (P, Q) into the output buffer's plane, the extra columns zero (the margins stay zero).
  float* load_output(const Conv2dShape& sh, const float* dy, float* buffer) const {
    float* dyw = buffer + margin;
    copy_rows(dy, sh.Q, dyw, Wp, sh.P, sh.Q, Wp - sh.Q);
    return dyw;
  }
};

bool wide_path(const Conv2dShape& sh) { return sh.stride_h == 1 && sh.stride_w == 1; }

// Per-thread scratch of the wide path: an input plane and an output buffer a thread, each
// thread's block a whole number of cache lines apart from the next (no line written by two).
struct WideScratch {
  std::vector<float> floats;
  int64_t per_thread;
  WideScratch(const Wide& wide, int threads) : per_thread((wide.in_size + wide.out_buffer() + 31) / 16 * 16) {
    floats.assign(size_t(per_thread * threads), 0.0f);
  }
  float* in(int t) { return floats.data() + t * per_thread; }
  float* out(int t, const Wide& wide) { return in(t) + wide.in_size; }
};

void forward_plane_wide(const Conv2dShape& sh, const Wide& wide, const float* x, const float* w, float bias, float* y,
                        float* xw, float* yw) {
  wide.load_input(sh, x, xw);
  if (wide.offset.size() == 9)
    taps_forward<9>(yw, xw, wide.offset.data(), w, 9, bias, wide.out_rounded);
  else
    taps_forward<0>(yw, xw, wide.offset.data(), w, wide.offset.size(), bias, wide.out_rounded);
  copy_rows(yw, wide.Wp, y, sh.Q, sh.P, sh.Q, 0);
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
      float *dxw = scratch.in(t), *buffer = scratch.out(t, wide);
      // Only the rows that hold x are gathered (from the first padded row's start).
      const int64_t begin = sh.pad_h * wide.Wp, count = round_up(sh.H * wide.Wp);
      for (int64_t k = c * Kg; k < (c + 1) * Kg; ++k) {
        const float* dyw = wide.load_output(sh, dy + (n * sh.K + k) * PQ, buffer);
        const bool first = k == c * Kg;
        if (RS == 9)
          taps_backward_data<9>(dxw + begin, dyw + begin, wide.offset.data(), w + k * RS, 9, first, count);
        else
          taps_backward_data<0>(dxw + begin, dyw + begin, wide.offset.data(), w + k * RS, size_t(RS), first, count);
      }
      copy_rows(dxw + sh.pad_h * wide.Wp + sh.pad_w, wide.Wp, dxp, sh.W, sh.H, sh.W, 0);
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
        float *xw = scratch.in(th), *buffer = scratch.out(th, wide);
        const size_t taps = wide.offset.size();
        double sums[kMaxTaps];
        float lanes[kMaxTaps * kLanes];
        // Float lanes gather at most kFlushBlocks blocks of a plane's products before the double sum.
        const int64_t flush_every = std::max<int64_t>(1, kFlushBlocks / (wide.out_rounded / kLanes));
        for (size_t t0 = 0; t0 < taps; t0 += kMaxTaps) {
          const size_t t1 = std::min(taps, t0 + kMaxTaps);
          std::fill(sums, sums + (t1 - t0), 0.0);
          std::fill(lanes, lanes + (t1 - t0) * kLanes, 0.0f);
          for (int64_t n = 0; n < sh.N; ++n) {
            wide.load_input(sh, x + (n * sh.C + c) * HW, xw);
            const float* dyw = wide.load_output(sh, dy + (n * sh.K + k) * PQ, buffer);
            if (t1 - t0 == 9)
              taps_backward_filter<9>(lanes, dyw, xw, wide.offset.data() + t0, 9, wide.out_rounded);
            else
              taps_backward_filter<0>(lanes, dyw, xw, wide.offset.data() + t0, t1 - t0, wide.out_rounded);
            if ((n + 1) % flush_every == 0 || n + 1 == sh.N) flush_lanes(sums, lanes, t1 - t0);
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
