// Max and average pooling on the CPU: a bounds-checked reference and a fast path that clips every
// window to the input once per call and threads over the N*C planes (planes never share dx); max
// forward is separable (rows, then columns) with branch-free selects.
// The bf16 rows, which are the f16 rows too (the CPU emulation, ops/dispatch.h), widen the channels-last operands into f32 NCHW,
// run the f32 row and round each output once (a max is one of its bf16 inputs, so exact).
// Trap: max backward must pick the same element as every other backend: the first in-bounds
// position in row-major window order whose value equals y (a NaN in the window wins and sticks).
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "core/checked.h"
#include "core/error.h"
#include "ops/convert.h"
#include "ops/pool2d.h"
#include "ops/simd_clones.h"

namespace cnn {

Pool2dShape Pool2dShape::make(PoolKind kind, int64_t N, int64_t C, int64_t H, int64_t W, int64_t R, int64_t S,
                              int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  if (N <= 0 || C <= 0 || H <= 0 || W <= 0)
    CNN_THROW("pool2d: input sizes must be positive, got N={} C={} H={} W={}", N, C, H, W);
  if (R <= 0 || S <= 0) CNN_THROW("pool2d: window must be positive, got {}x{}", R, S);
  if (stride_h <= 0 || stride_w <= 0) CNN_THROW("pool2d: stride must be positive, got {}x{}", stride_h, stride_w);
  if (pad_h < 0 || pad_w < 0) CNN_THROW("pool2d: padding must be non-negative, got {}x{}", pad_h, pad_w);
  Pool2dShape sh;
  sh.stride_h = narrow_to_int(stride_h, "pool2d: stride");
  sh.stride_w = narrow_to_int(stride_w, "pool2d: stride");
  sh.pad_h = narrow_to_int(pad_h, "pool2d: padding");
  sh.pad_w = narrow_to_int(pad_w, "pool2d: padding");
  check_tensor_cap(checked_product({N, C, H, W}), fmt::format("pool2d: the input (N={}, C={}, H={}, W={})", N, C, H, W));
  // With pad <= R/2 every window holds at least one input element, so max and the average's
  // divisor are always defined. Padding fits an int and H, W are within the cap: no overflow below.
  if (2 * pad_h > R || 2 * pad_w > S)
    CNN_THROW("pool2d: padding {}x{} must be at most half the window {}x{}", pad_h, pad_w, R, S);
  if (R > H + 2 * pad_h || S > W + 2 * pad_w)
    CNN_THROW("pool2d: window {}x{} is larger than the padded input {}x{} (input {}x{}, padding {}x{})", R, S,
              H + 2 * pad_h, W + 2 * pad_w, H, W, pad_h, pad_w);
  sh.kind = kind;
  sh.N = N;
  sh.C = C;
  sh.H = H;
  sh.W = W;
  sh.R = R;
  sh.S = S;
  sh.P = (H + 2 * pad_h - R) / stride_h + 1;  // floor mode
  sh.Q = (W + 2 * pad_w - S) / stride_w + 1;
  check_tensor_cap(checked_product({N, C, sh.P, sh.Q}),
                   fmt::format("pool2d: the output (N={}, C={}, P={}, Q={})", N, C, sh.P, sh.Q));
  return sh;
}

std::string Pool2dShape::to_string() const {
  return fmt::format("{} N={} C={} {}x{} -> {}x{} window {}x{} stride {}x{} pad {}x{}",
                     kind == PoolKind::max ? "maxpool" : "avgpool", N, C, H, W, P, Q, R, S, stride_h, stride_w,
                     pad_h, pad_w);
}

// m <- v when v is larger, or when v is the first NaN (so NaN propagates like in other frameworks).
template <typename T>
static inline bool max_takes(T v, T m) {
  return v > m || (v != v && m == m);
}
template <typename T>
static inline bool is_argmax(T v, T y) {
  return (v == y) | ((v != v) & (y != y));  // & and |, not && and ||: no branches, so loops vectorise
}

static void check_made(const Pool2dShape& sh) {
  if (sh.N <= 0 || sh.C <= 0 || sh.P <= 0 || sh.Q <= 0)
    CNN_THROW("pool2d: shape was not made by Pool2dShape::make ({})", sh.to_string());
}

template <typename T>
void pool2d_forward_reference(const ExecContext& ctx, const Pool2dShape& sh,
                              const T* x,  // (N, C, H, W)
                              T* y) {      // (N, C, P, Q)
  check_made(sh);
  for (int64_t nc = 0; nc < sh.N * sh.C; ++nc) {
    const T* xp = x + nc * sh.H * sh.W;
    T* yp = y + nc * sh.P * sh.Q;
    for (int64_t p = 0; p < sh.P; ++p) {
      for (int64_t q = 0; q < sh.Q; ++q) {
        T acc = T(0);
        int64_t count = 0;
        for (int64_t r = 0; r < sh.R; ++r) {
          for (int64_t s = 0; s < sh.S; ++s) {
            int64_t h = p * sh.stride_h - sh.pad_h + r, w = q * sh.stride_w - sh.pad_w + s;
            if (h < 0 || h >= sh.H || w < 0 || w >= sh.W) continue;
            T v = xp[h * sh.W + w];
            if (sh.kind == PoolKind::avg)
              acc += v;
            else if (count == 0 || max_takes(v, acc))
              acc = v;
            ++count;
          }
        }
        yp[p * sh.Q + q] = sh.kind == PoolKind::avg ? acc / static_cast<T>(count) : acc;
      }
    }
  }
}

template <typename T>
void pool2d_backward_reference(const ExecContext& ctx, const Pool2dShape& sh,
                               const T* x,   // (N, C, H, W)
                               const T* y,   // (N, C, P, Q)
                               const T* dy,  // (N, C, P, Q)
                               T* dx) {      // (N, C, H, W)
  check_made(sh);
  std::fill(dx, dx + sh.N * sh.C * sh.H * sh.W, T(0));
  for (int64_t nc = 0; nc < sh.N * sh.C; ++nc) {
    const T* xp = x + nc * sh.H * sh.W;
    T* dxp = dx + nc * sh.H * sh.W;
    for (int64_t p = 0; p < sh.P; ++p) {
      for (int64_t q = 0; q < sh.Q; ++q) {
        const int64_t o = nc * sh.P * sh.Q + p * sh.Q + q;
        int64_t count = 0;
        for (int64_t r = 0; r < sh.R; ++r)
          for (int64_t s = 0; s < sh.S; ++s) {
            int64_t h = p * sh.stride_h - sh.pad_h + r, w = q * sh.stride_w - sh.pad_w + s;
            if (h >= 0 && h < sh.H && w >= 0 && w < sh.W) ++count;
          }
        bool routed = false;
        for (int64_t r = 0; r < sh.R && !routed; ++r) {
          for (int64_t s = 0; s < sh.S && !routed; ++s) {
            int64_t h = p * sh.stride_h - sh.pad_h + r, w = q * sh.stride_w - sh.pad_w + s;
            if (h < 0 || h >= sh.H || w < 0 || w >= sh.W) continue;
            if (sh.kind == PoolKind::avg) {
              dxp[h * sh.W + w] += dy[o] / static_cast<T>(count);
            } else if (is_argmax(xp[h * sh.W + w], y[o])) {
              dxp[h * sh.W + w] += dy[o];
              routed = true;
            }
          }
        }
      }
    }
  }
}

template void pool2d_forward_reference<float>(const ExecContext&, const Pool2dShape&, const float*, float*);
template void pool2d_forward_reference<double>(const ExecContext&, const Pool2dShape&, const double*, double*);
template void pool2d_backward_reference<float>(const ExecContext&, const Pool2dShape&, const float*, const float*,
                                               const float*, float*);
template void pool2d_backward_reference<double>(const ExecContext&, const Pool2dShape&, const double*,
                                                const double*, const double*, double*);

// Below this much work (elements times window) a parallel region costs more than it saves.
static constexpr int64_t kParallelMin = int64_t{1} << 15;

// The input range [begin, end) that output index o reads along one axis, padding clipped away.
struct Span {
  int64_t begin, end;
};
static std::vector<Span> clipped_spans(int64_t out, int64_t size, int64_t window, int stride, int pad) {
  std::vector<Span> spans(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    int64_t start = o * stride - pad;
    spans[o] = {std::max<int64_t>(start, 0), std::min<int64_t>(start + window, size)};
  }
  return spans;
}

// max_takes as a select, which compiles without a branch (random data mispredicts every other one).
static inline float max_select(float v, float m) { return (v > m) | ((v != v) & (m == m)) ? v : m; }

// Per-thread scratch rows start 64 elements apart at least, so two threads never write one cache
// line (on 6x6 planes a shared line made the forward 4x slower).
static int64_t padded_to_lines(int64_t count) { return (count + 63) / 64 * 64 + 64; }

// Max pooling of one plane, separably: per output row the elementwise max of its window's input
// rows (vectorised) into the band, then each output's max over its columns of the band, also
// vectorised: the band (`Band`) holds the row at offset pad_w between -inf columns, so every window
// reads S band columns from q * stride_w without clipping (a -inf never wins against a real value,
// and every window holds one). Every window with a NaN gives a NaN, as the reference; other values
// are order-independent (ties of +0 and -0 may keep the other zero, which compares equal, so
// backward routes alike).
struct Band {
  int64_t size;
  explicit Band(const Pool2dShape& sh) : size(std::max<int64_t>((sh.Q - 1) * sh.stride_w + sh.S, sh.pad_w + sh.W)) {}
  // -inf everywhere; the row pass only writes [pad_w, pad_w + W).
  void init(float* band) const { std::fill(band, band + size, -std::numeric_limits<float>::infinity()); }
};

static void max_pool_plane(const Pool2dShape& sh, const float* xp, float* yp, const std::vector<Span>& rows,
                           bool pairs, float* band_base) {
  const int64_t W = sh.W, Q = sh.Q, S = sh.S, sw = sh.stride_w;
  float* band = band_base + sh.pad_w;
  for (int64_t p = 0; p < sh.P; ++p) {
    const Span rs = rows[p];
    std::memcpy(band, xp + rs.begin * W, size_t(W) * sizeof(float));
    for (int64_t h = rs.begin + 1; h < rs.end; ++h) {
      const float* xr = xp + h * W;
#pragma omp simd
      for (int64_t w = 0; w < W; ++w) band[w] = max_select(xr[w], band[w]);
    }
    float* yr = yp + p * Q;
    if (pairs) {  // 2 columns a window, stride 2, no padding: the same selects, in a loop that vectorises
#pragma omp simd
      for (int64_t q = 0; q < Q; ++q) yr[q] = max_select(band[2 * q + 1], band[2 * q]);
      continue;
    }
#pragma omp simd
    for (int64_t q = 0; q < Q; ++q) yr[q] = band_base[q * sw];
    for (int64_t s = 1; s < S; ++s) {
#pragma omp simd
      for (int64_t q = 0; q < Q; ++q) yr[q] = max_select(band_base[q * sw + s], yr[q]);
    }
  }
}

// Whether the windows are 2 columns at stride 2 without padding (cols[q] = [2q, 2q + 2)).
static bool column_pairs(const Pool2dShape& sh) { return sh.S == 2 && sh.stride_w == 2 && sh.pad_w == 0; }

// Max-pool backward of one plane for 2x2 windows at stride 2 without padding: the windows do not
// overlap, so each input of a window is written once: dy to the window's first input (row-major)
// equal to its output, 0 to the others, as the general loop's zeroed plane plus dy would leave it
// (0 + g, so a -0 gradient lands as +0 there too). Inputs past the last window stay zero.
CNN_SIMD_CLONES static void max_pool_backward_2x2(const float* xp, const float* yp, const float* dyp, float* dxp,
                                                  int64_t H, int64_t W, int64_t P, int64_t Q) {
  if (H != 2 * P || W != 2 * Q) std::memset(dxp, 0, static_cast<size_t>(H * W) * sizeof(float));
  for (int64_t p = 0; p < P; ++p) {
    const float* r0 = xp + 2 * p * W;
    const float* r1 = r0 + W;
    float* d0 = dxp + 2 * p * W;
    float* d1 = d0 + W;
    const float* yr = yp + p * Q;
    const float* gr = dyp + p * Q;
    // Branch-free (is_argmax, and & and | below), so the loop vectorises: with short-circuits it had
    // control flow and ran scalar, at a quarter of the forward's bandwidth.
#pragma omp simd
    for (int64_t q = 0; q < Q; ++q) {
      const float m = yr[q], g = 0.0f + gr[q];
      const bool ea = is_argmax(r0[2 * q], m), eb = is_argmax(r0[2 * q + 1], m);
      const bool ec = is_argmax(r1[2 * q], m), ed = is_argmax(r1[2 * q + 1], m);
      const bool a = ea;
      const bool b = eb & !a;
      const bool c = ec & !(a | b);
      const bool d = ed & !(a | b | c);
      d0[2 * q] = a ? g : 0.0f;
      d0[2 * q + 1] = b ? g : 0.0f;
      d1[2 * q] = c ? g : 0.0f;
      d1[2 * q + 1] = d ? g : 0.0f;
    }
  }
}

// Max-pool backward of one plane, any window: dy of each output goes to the first input of its
// window (row-major) equal to the output, added in output order as the reference does, so dx is
// bit-identical. The outputs whose windows lie inside the columns ([q_lo, q_hi)) search by selects
// over the window taken backwards, each window position one vectorised pass over the row's outputs;
// the few border windows (all of a short row's) search their clipped spans. `at` holds one row's picks (Q).
static void max_pool_backward_plane(const Pool2dShape& sh, const float* xp, const float* yp, const float* dyp,
                                    float* dxp, const std::vector<Span>& rows, const std::vector<Span>& cols,
                                    int32_t* at) {
  const int64_t W = sh.W, Q = sh.Q, S = sh.S, sw = sh.stride_w, pw = sh.pad_w;
  const int64_t q_lo = std::min<int64_t>(Q, (pw + sw - 1) / sw);
  const int64_t q_hi = std::max<int64_t>(q_lo, std::min<int64_t>(Q, W - S + pw < 0 ? 0 : (W - S + pw) / sw + 1));
  std::memset(dxp, 0, static_cast<size_t>(sh.H * W) * sizeof(float));
  for (int64_t p = 0; p < sh.P; ++p) {
    const Span rs = rows[p];
    const float* yr = yp + p * Q;
    if (q_hi - q_lo < 8) {  // a short row (mini_xception's 6 and 3 outputs): search and add at once
      for (int64_t q = 0; q < Q; ++q) {
        const Span cs = cols[q];
        int64_t pick = -1;
        for (int64_t h = rs.begin; h < rs.end && pick < 0; ++h)
          for (int64_t w = cs.begin; w < cs.end; ++w)
            if (is_argmax(xp[h * W + w], yr[q])) {
              pick = h * W + w;
              break;
            }
        if (pick >= 0) dxp[pick] += dyp[p * Q + q];
      }
      continue;
    }
    for (int64_t q = 0; q < Q; ++q) {
      if (q == q_lo) q = q_hi;  // the interior is searched below
      if (q >= Q) break;
      const Span cs = cols[q];
      at[q] = -1;
      for (int64_t h = rs.begin; h < rs.end && at[q] < 0; ++h)
        for (int64_t w = cs.begin; w < cs.end; ++w)
          if (is_argmax(xp[h * W + w], yr[q])) {
            at[q] = static_cast<int32_t>(h * W + w);
            break;
          }
    }
    for (int64_t q = q_lo; q < q_hi; ++q) at[q] = -1;
    for (int64_t h = rs.end - 1; h >= rs.begin; --h)
      for (int64_t s = S - 1; s >= 0; --s) {
        const int32_t base = static_cast<int32_t>(h * W - pw + s);  // a plane is within the tensor cap (2^31)
        const float* xr = xp + base;
#pragma omp simd
        for (int64_t q = q_lo; q < q_hi; ++q) at[q] = is_argmax(xr[q * sw], yr[q]) ? base + int32_t(q * sw) : at[q];
      }
    const float* gr = dyp + p * Q;
    for (int64_t q = 0; q < Q; ++q)
      if (at[q] >= 0) dxp[at[q]] += gr[q];
  }
}

void pool2d_forward_cpu(const Pool2dForward& a) {
  const Pool2dShape& sh = a.sh;
  const float* x = a.x.f32();
  float* y = a.y.f32();
  check_made(sh);
  const std::vector<Span> rows = clipped_spans(sh.P, sh.H, sh.R, sh.stride_h, sh.pad_h);
  const std::vector<Span> cols = clipped_spans(sh.Q, sh.W, sh.S, sh.stride_w, sh.pad_w);
  const int64_t planes = sh.N * sh.C, H = sh.H, W = sh.W, P = sh.P, Q = sh.Q;
  const bool is_max = sh.kind == PoolKind::max, pairs = column_pairs(sh);
  const int threads = a.ctx->threads();
  const Band layout(sh);
  const int64_t band_stride = padded_to_lines(layout.size);
  std::vector<float> bands(is_max ? size_t(threads * band_stride) : 0);  // one row band per thread
#pragma omp parallel num_threads(threads) if (planes * P * Q * sh.R * sh.S >= kParallelMin)
  {
  float* band = is_max ? bands.data() + omp_get_thread_num() * band_stride : nullptr;
  if (is_max) layout.init(band);
#pragma omp for schedule(static)
  for (int64_t nc = 0; nc < planes; ++nc) {
    const float* xp = x + nc * H * W;
    float* yp = y + nc * P * Q;
    if (is_max) {
      max_pool_plane(sh, xp, yp, rows, pairs, band);
      continue;
    }
    for (int64_t p = 0; p < P; ++p) {
      const Span rs = rows[p];
      for (int64_t q = 0; q < Q; ++q) {
        const Span cs = cols[q];
        float sum = 0.0f;
        for (int64_t h = rs.begin; h < rs.end; ++h)
          for (int64_t w = cs.begin; w < cs.end; ++w) sum += xp[h * W + w];
        yp[p * Q + q] = sum / static_cast<float>((rs.end - rs.begin) * (cs.end - cs.begin));
      }
    }
  }
  }
}

// Windows may overlap, so each plane scatters into its own dx plane; planes run in parallel.
void pool2d_backward_cpu(const Pool2dBackward& a) {
  const Pool2dShape& sh = a.sh;
  const float *x = a.x.f32(), *y = a.y.f32(), *dy = a.dy.f32();
  float* dx = a.dx.f32();
  check_made(sh);
  const std::vector<Span> rows = clipped_spans(sh.P, sh.H, sh.R, sh.stride_h, sh.pad_h);
  const std::vector<Span> cols = clipped_spans(sh.Q, sh.W, sh.S, sh.stride_w, sh.pad_w);
  const int64_t planes = sh.N * sh.C, H = sh.H, W = sh.W, P = sh.P, Q = sh.Q;
  const bool is_max = sh.kind == PoolKind::max;
  const bool two_by_two = is_max && sh.R == 2 && sh.stride_h == 2 && sh.pad_h == 0 && column_pairs(sh);
  const int threads = a.ctx->threads();
  const int64_t picks_stride = padded_to_lines(Q);
  std::vector<int32_t> picks(is_max ? size_t(threads * picks_stride) : 0);  // one row of picks per thread
#pragma omp parallel for num_threads(threads) if (planes * P * Q * sh.R * sh.S >= kParallelMin) schedule(static)
  for (int64_t nc = 0; nc < planes; ++nc) {
    const float* xp = x + nc * H * W;
    const float* yp = y + nc * P * Q;
    const float* dyp = dy + nc * P * Q;
    float* dxp = dx + nc * H * W;
    if (two_by_two) {
      max_pool_backward_2x2(xp, yp, dyp, dxp, H, W, P, Q);
      continue;
    }
    if (is_max) {
      max_pool_backward_plane(sh, xp, yp, dyp, dxp, rows, cols, picks.data() + omp_get_thread_num() * picks_stride);
      continue;
    }
    std::memset(dxp, 0, static_cast<size_t>(H * W) * sizeof(float));
    for (int64_t p = 0; p < P; ++p) {
      const Span rs = rows[p];
      for (int64_t q = 0; q < Q; ++q) {
        const Span cs = cols[q];
        const float share = dyp[p * Q + q] / static_cast<float>((rs.end - rs.begin) * (cs.end - cs.begin));
        for (int64_t h = rs.begin; h < rs.end; ++h)
          for (int64_t w = cs.begin; w < cs.end; ++w) dxp[h * W + w] += share;
      }
    }
  }
}

void pool2d_forward_cpu_bf16(const Pool2dForward& a) {
  const Pool2dShape& sh = a.sh;
  check_made(sh);
  const ActDims in{sh.N, sh.C, sh.H, sh.W}, out{sh.N, sh.C, sh.P, sh.Q};
  const std::vector<float> x = widen(a.x, in);
  std::vector<float> y(size_t(out.numel()));
  pool2d_forward_cpu(Pool2dForward{a.ctx, sh, x.data(), y.data()});
  narrow(y.data(), out, a.y);
}

// x and y are widened when given: average pooling ignores their values (and may get null ones).
void pool2d_backward_cpu_bf16(const Pool2dBackward& a) {
  const Pool2dShape& sh = a.sh;
  check_made(sh);
  const ActDims in{sh.N, sh.C, sh.H, sh.W}, out{sh.N, sh.C, sh.P, sh.Q};
  const std::vector<float> x = widen(a.x, in), y = widen(a.y, out), dy = widen(a.dy, out);
  std::vector<float> dx(size_t(in.numel()));
  pool2d_backward_cpu(Pool2dBackward{a.ctx, sh, a.x.null() ? nullptr : x.data(), a.y.null() ? nullptr : y.data(),
                                     dy.data(), dx.data()});
  narrow(dx.data(), in, a.dx);
}

}  // namespace cnn
