// Winograd convolution on the CPU (Lavin & Gray 2016), the "cpu:winograd" rows: 3x3, stride 1,
// dilation 1, groups 1, padding at most 2. F(M x M, 3 x 3) with M = 4 (6x6 input tiles, 36
// products a tile for 16 outputs) where the output is at least 8x8, else M = 2 (4x4 tiles, 16
// products for 4 outputs). Each T x T input tile (T = M + 2) becomes T^2 values per channel
// (V = B^T d B), the filters T^2 per channel pair (U = G g G^T), and the T^2 products
// M[f] (K, T) = U[f] (K, C) * V[f] (C, T) are single-threaded SGEMMs over a block of tiles taken
// from one or several images; y's M x M output tiles are A^T M A. backward_data is the same
// algorithm on dy with the filters rotated and channels swapped, padding 2 - pad. backward_filter is
// its transpose, F(3x3, M x M): dw (3x3) = G^T [sum over tiles of (A e A^T) (.) (B^T d B)] G, e an
// M x M tile of dy and d the T x T tile of x the forward reads for it, so the T^2 products are
// M[f] (K, C) += E[f] (K, T) * V[f] (C, T)^T, each thread summing its blocks' tiles into its own M.
// Trap: a block of tile rows may span images (small layers) or cut one (large ones); every output
// tile is written by exactly one block, so no forward or data sums cross threads, but the block
// size follows the thread count; the filter gradient adds the threads' M in thread order, so its
// bits depend on the thread count (as the im2col filter gradient's do).
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/checked.h"
#include "core/error.h"
#include "core/parallel_errors.h"
#include "ops/blas_cpu.h"
#include "ops/conv2d.h"
#include "ops/simd_clones.h"

namespace cnn {

namespace {

// One convolution in the form the algorithm runs: x (N, C, H, W) * filters -> y (N, K, P, Q) with
// P = H + 2 pad_h - 2, Q = W + 2 pad_w - 2, in output tiles of m x m (m: wino_m).
struct WinoGeom {
  int64_t N, C, H, W, K, P, Q, pad_h, pad_w;
  int m;
  int64_t t() const { return m + 2; }  // input tile side
  int64_t f() const { return t() * t(); }  // products a tile
  int64_t tiles_h() const { return (P + m - 1) / m; }
  int64_t tiles_w() const { return (Q + m - 1) / m; }
  int64_t tiles() const { return N * tiles_h() * tiles_w(); }
};

// F(4x4, 3x3) where the output is at least 8x8 (two tiles a side or more), else F(2x2, 3x3).
int wino_m(int64_t P, int64_t Q) { return P >= 8 && Q >= 8 ? 4 : 2; }

// The transforms of F(M x M, 3 x 3), each a small matrix applied to a vector: bt (B^T, T from T),
// at (A^T, M from T), g (G, T from 3), a (A, T from M), gt (G^T, 3 from T).
template <int M>
struct Wino;

// B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
// A^T = [1 1 1 0; 0 1 -1 -1].
template <>
struct Wino<2> {
  static constexpr int T = 4;
  static inline void bt(const float* d, float* r) {
    r[0] = d[0] - d[2], r[1] = d[1] + d[2], r[2] = d[2] - d[1], r[3] = d[1] - d[3];
  }
  static inline void at(const float* m, float* y) { y[0] = m[0] + m[1] + m[2], y[1] = m[1] - m[2] - m[3]; }
  static inline void g(const float* g, float* u) {
    u[0] = g[0], u[1] = 0.5f * (g[0] + g[1] + g[2]), u[2] = 0.5f * (g[0] - g[1] + g[2]), u[3] = g[2];
  }
  static inline void a(const float* e, float* t) { t[0] = e[0], t[1] = e[0] + e[1], t[2] = e[0] - e[1], t[3] = -e[1]; }
  static inline void gt(const float* m, float* o) {
    o[0] = m[0] + 0.5f * (m[1] + m[2]), o[1] = 0.5f * (m[1] - m[2]), o[2] = 0.5f * (m[1] + m[2]) + m[3];
  }
};

// The points 0, 1, -1, 2, -2 and infinity:
// B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1],
// G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1],
// A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1].
template <>
struct Wino<4> {
  static constexpr int T = 6;
  static inline void bt(const float* d, float* r) {
    const float s13 = d[3] - 4.0f * d[1], s24 = d[4] - 4.0f * d[2];  // r1, r2 = s24 +- s13
    const float t13 = 2.0f * (d[3] - d[1]), t24 = d[4] - d[2];       // r3, r4 = t24 +- t13
    r[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
    r[1] = s24 + s13, r[2] = s24 - s13;
    r[3] = t24 + t13, r[4] = t24 - t13;
    r[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
  }
  static inline void at(const float* m, float* y) {
    const float a12 = m[1] + m[2], s12 = m[1] - m[2], a34 = m[3] + m[4], s34 = m[3] - m[4];
    y[0] = m[0] + a12 + a34;
    y[1] = s12 + 2.0f * s34;
    y[2] = a12 + 4.0f * a34;
    y[3] = s12 + 8.0f * s34 + m[5];
  }
  static inline void g(const float* g, float* u) {
    const float e = g[0] + g[2];
    u[0] = 0.25f * g[0];
    u[1] = (-1.0f / 6.0f) * (e + g[1]);
    u[2] = (-1.0f / 6.0f) * (e - g[1]);
    const float p = (1.0f / 24.0f) * g[0] + (1.0f / 6.0f) * g[2], q = (1.0f / 12.0f) * g[1];
    u[3] = p + q, u[4] = p - q;
    u[5] = g[2];
  }
  static inline void a(const float* e, float* t) {
    const float a02 = e[0] + e[2], a13 = e[1] + e[3];
    const float b02 = e[0] + 4.0f * e[2], b13 = 2.0f * e[1] + 8.0f * e[3];
    t[0] = e[0], t[1] = a02 + a13, t[2] = a02 - a13, t[3] = b02 + b13, t[4] = b02 - b13, t[5] = e[3];
  }
  static inline void gt(const float* m, float* o) {
    const float a12 = m[1] + m[2], s12 = m[1] - m[2], a34 = m[3] + m[4], s34 = m[3] - m[4];
    o[0] = 0.25f * m[0] - (1.0f / 6.0f) * a12 + (1.0f / 24.0f) * a34;
    o[1] = (-1.0f / 6.0f) * s12 + (1.0f / 12.0f) * s34;
    o[2] = (-1.0f / 6.0f) * a12 + (1.0f / 6.0f) * a34 + m[5];
  }
};

// Tile rows per SGEMM block: the block's V and M (F (C + K) floats a tile) within about 2 MB, at
// least 64 and at most 1024 tiles (one tile row at least), the blocks cut evenly, a multiple of the
// thread count of them.
constexpr int64_t kBlockFloats = int64_t{1} << 19, kMinTiles = 64, kMaxTiles = 1024;
int64_t rows_per_block(const WinoGeom& g, int threads, int64_t block_floats = kBlockFloats,
                       int64_t max_tiles = kMaxTiles) {
  const int64_t want_tiles = std::clamp<int64_t>(block_floats / (g.f() * (g.C + g.K)), kMinTiles, max_tiles);
  const int64_t total = g.N * g.tiles_h(), want = std::max<int64_t>(1, want_tiles / g.tiles_w());
  int64_t blocks = (total + want - 1) / want;
  blocks = std::min(total, (blocks + threads - 1) / threads * threads);
  return (total + blocks - 1) / blocks;
}

// U (F, K, C) = G g G^T of the 3x3 filter g9 (row major), read rotated by 180 degrees when `rotate`.
template <int M>
inline __attribute__((always_inline)) void transform_filter_t(const float* g9, bool rotate, float* u) {
  constexpr int T = Wino<M>::T;
  float g[9];
  for (int i = 0; i < 9; ++i) g[i] = g9[rotate ? 8 - i : i];
  float t[3][T];  // G g, column by column, stored transposed: t[j] = G (column j of g)
  for (int j = 0; j < 3; ++j) {
    const float col[3] = {g[j], g[3 + j], g[6 + j]};
    Wino<M>::g(col, t[j]);
  }
  for (int i = 0; i < T; ++i) {  // row i of (G g) G^T
    const float row[3] = {t[0][i], t[1][i], t[2][i]};
    Wino<M>::g(row, u + i * T);
  }
}

// The transforms run as stages over a block's tiles: each stage applies one of Wino's small
// matrices to planes of n contiguous floats (one value of every tile), a loop the compiler
// vectorizes (it does so with each plane its own restrict pointer, not with planes at strides of
// one pointer or in an array of pointers: GCC 12 reports "no vectype" there).
// A^T of F(4x4, 3x3) on six planes into four (+ bias), and of F(2x2, 3x3) on four into two.
inline __attribute__((always_inline)) void at_stage(const float* __restrict m0, const float* __restrict m1,
                                                    const float* __restrict m2, const float* __restrict m3,
                                                    const float* __restrict m4, const float* __restrict m5,
                                                    int64_t n, float bias, float* __restrict y0,
                                                    float* __restrict y1, float* __restrict y2,
                                                    float* __restrict y3) {
  for (int64_t t = 0; t < n; ++t) {
    const float m[6] = {m0[t], m1[t], m2[t], m3[t], m4[t], m5[t]};
    float y[4];
    Wino<4>::at(m, y);
    y0[t] = y[0] + bias, y1[t] = y[1] + bias, y2[t] = y[2] + bias, y3[t] = y[3] + bias;
  }
}
inline __attribute__((always_inline)) void at_stage(const float* __restrict m0, const float* __restrict m1,
                                                    const float* __restrict m2, const float* __restrict m3,
                                                    int64_t n, float bias, float* __restrict y0,
                                                    float* __restrict y1) {
  for (int64_t t = 0; t < n; ++t) {
    const float m[4] = {m0[t], m1[t], m2[t], m3[t]};
    float y[2];
    Wino<2>::at(m, y);
    y0[t] = y[0] + bias, y1[t] = y[1] + bias;
  }
}
// A (T from M) of F(4x4, 3x3) on four planes into six, and of F(2x2, 3x3) on two into four.
inline __attribute__((always_inline)) void a_stage(const float* __restrict e0, const float* __restrict e1,
                                                   const float* __restrict e2, const float* __restrict e3,
                                                   int64_t n, float* __restrict t0, float* __restrict t1,
                                                   float* __restrict t2, float* __restrict t3,
                                                   float* __restrict t4, float* __restrict t5) {
  for (int64_t t = 0; t < n; ++t) {
    const float e[4] = {e0[t], e1[t], e2[t], e3[t]};
    float r[6];
    Wino<4>::a(e, r);
    t0[t] = r[0], t1[t] = r[1], t2[t] = r[2], t3[t] = r[3], t4[t] = r[4], t5[t] = r[5];
  }
}
inline __attribute__((always_inline)) void a_stage(const float* __restrict e0, const float* __restrict e1,
                                                   int64_t n, float* __restrict t0, float* __restrict t1,
                                                   float* __restrict t2, float* __restrict t3) {
  for (int64_t t = 0; t < n; ++t) {
    const float e[2] = {e0[t], e1[t]};
    float r[4];
    Wino<2>::a(e, r);
    t0[t] = r[0], t1[t] = r[1], t2[t] = r[2], t3[t] = r[3];
  }
}

// Planes of n floats: in[i * stride] for i < count (a stage's operands).
template <int M>
inline void at_planes(const float* in, int64_t stride, int64_t n, float bias, float* out, int64_t out_stride) {
  if constexpr (M == 4)
    at_stage(in, in + stride, in + 2 * stride, in + 3 * stride, in + 4 * stride, in + 5 * stride, n, bias, out,
             out + out_stride, out + 2 * out_stride, out + 3 * out_stride);
  else
    at_stage(in, in + stride, in + 2 * stride, in + 3 * stride, n, bias, out, out + out_stride);
}
template <int M>
inline void a_planes(const float* in, int64_t stride, int64_t n, float* out, int64_t out_stride) {
  if constexpr (M == 4)
    a_stage(in, in + stride, in + 2 * stride, in + 3 * stride, n, out, out + out_stride, out + 2 * out_stride,
            out + 3 * out_stride, out + 4 * out_stride, out + 5 * out_stride);
  else
    a_stage(in, in + stride, n, out, out + out_stride, out + 2 * out_stride, out + 3 * out_stride);
}

// B^T of F(4x4, 3x3) on six planes into six, and of F(2x2, 3x3) on four into four.
inline __attribute__((always_inline)) void bt_stage(const float* __restrict d0, const float* __restrict d1,
                                                    const float* __restrict d2, const float* __restrict d3,
                                                    const float* __restrict d4, const float* __restrict d5,
                                                    int64_t n, float* __restrict r0, float* __restrict r1,
                                                    float* __restrict r2, float* __restrict r3,
                                                    float* __restrict r4, float* __restrict r5) {
  for (int64_t t = 0; t < n; ++t) {
    const float d[6] = {d0[t], d1[t], d2[t], d3[t], d4[t], d5[t]};
    float r[6];
    Wino<4>::bt(d, r);
    r0[t] = r[0], r1[t] = r[1], r2[t] = r[2], r3[t] = r[3], r4[t] = r[4], r5[t] = r[5];
  }
}
inline __attribute__((always_inline)) void bt_stage(const float* __restrict d0, const float* __restrict d1,
                                                    const float* __restrict d2, const float* __restrict d3,
                                                    int64_t n, float* __restrict r0, float* __restrict r1,
                                                    float* __restrict r2, float* __restrict r3) {
  for (int64_t t = 0; t < n; ++t) {
    const float d[4] = {d0[t], d1[t], d2[t], d3[t]};
    float r[4];
    Wino<2>::bt(d, r);
    r0[t] = r[0], r1[t] = r[1], r2[t] = r[2], r3[t] = r[3];
  }
}
template <int M>
inline void bt_planes(const float* in, int64_t stride, int64_t n, float* out, int64_t out_stride) {
  if constexpr (M == 4)
    bt_stage(in, in + stride, in + 2 * stride, in + 3 * stride, in + 4 * stride, in + 5 * stride, n, out,
             out + out_stride, out + 2 * out_stride, out + 3 * out_stride, out + 4 * out_stride,
             out + 5 * out_stride);
  else
    bt_stage(in, in + stride, in + 2 * stride, in + 3 * stride, n, out, out + out_stride, out + 2 * out_stride,
             out + 3 * out_stride);
}

// A transformed input row s dealt into its tile columns' planes: plane k gets s[k + M q] for the
// row's tiles q < n. Planes 0 .. M-1 are one interleaved read of s (GCC vectorises a group of M
// loads with shuffles; dealt a plane at a time it was a strided gather, the largest part of the
// input transform); plane k >= M is plane k - M one tile on, s[k + M q] = s[(k - M) + M (q + 1)].
inline __attribute__((always_inline)) void deal_stage(const float* __restrict s, int64_t n, float* __restrict p0,
                                                      float* __restrict p1, float* __restrict p2,
                                                      float* __restrict p3) {
  for (int64_t q = 0; q < n; ++q) {
    p0[q] = s[4 * q];
    p1[q] = s[4 * q + 1];
    p2[q] = s[4 * q + 2];
    p3[q] = s[4 * q + 3];
  }
}
inline __attribute__((always_inline)) void deal_stage(const float* __restrict s, int64_t n, float* __restrict p0,
                                                      float* __restrict p1) {
  for (int64_t q = 0; q < n; ++q) {
    p0[q] = s[2 * q];
    p1[q] = s[2 * q + 1];
  }
}
// The T planes of row s (n >= 1 tiles) at out + k out_stride; s holds M n + 2 values.
template <int M>
inline void deal_planes(const float* s, int64_t n, float* out, int64_t out_stride) {
  if constexpr (M == 4)
    deal_stage(s, n, out, out + out_stride, out + 2 * out_stride, out + 3 * out_stride);
  else
    deal_stage(s, n, out, out + out_stride);
  for (int k = M; k < Wino<M>::T; ++k) {
    const float* from = out + (k - M) * out_stride;
    float* to = out + k * out_stride;
    std::copy(from + 1, from + n, to);
    to[n - 1] = s[k + M * (n - 1)];
  }
}

// Floats of the output and dy transforms' planes: (T M + M M) of a block's tiles.
int64_t stage_floats(const WinoGeom& g, int64_t tiles) { return (g.t() * g.m + g.m * g.m) * tiles; }

// Floats of the input transform's scratch: T padded rows of (M TW + 2) and B^T of them, then T x T
// planes of a block's tiles.
int64_t input_floats(const WinoGeom& g, int64_t tiles) {
  return 2 * g.t() * (g.m * g.tiles_w() + 2) + g.f() * tiles;
}

// V[f] (C, ld) for the tiles of tile rows [r0, r0 + nr) (tile row: image n, output rows m tp ..
// m tp + m - 1; TW tiles each, row j's tiles at columns j TW ...): B^T d B of each T x T input tile d
// (zeros outside x). Per channel: B^T on each tile row's T padded input rows (a loop along the
// rows), those values dealt into T x T planes of the block's tiles (plane i T + k: row i, column
// k of each tile; deal_planes), then B along the planes, which writes V's planes (loops over the
// block's tiles).
template <int M>
inline __attribute__((always_inline)) void transform_input_t(const WinoGeom& g, const float* x, int64_t r0,
                                                             int64_t nr, int64_t ld, float* v, float* scratch) {
  constexpr int T = Wino<M>::T;
  const int64_t th = g.tiles_h(), tw = g.tiles_w(), wp = M * tw + 2, HW = g.H * g.W, fs = g.C * ld, nt = nr * tw;
  float* d = scratch;            // T padded input rows
  float* dt = scratch + T * wp;  // B^T of them
  float* planes = dt + T * wp;
  for (int64_t c = 0; c < g.C; ++c) {
    for (int64_t j = 0; j < nr; ++j) {
      const int64_t n = (r0 + j) / th, h0 = M * ((r0 + j) % th) - g.pad_h;
      const float* xc = x + (n * g.C + c) * HW;
      for (int i = 0; i < T; ++i) {
        float* row = d + i * wp;
        const int64_t h = h0 + i;
        if (h < 0 || h >= g.H) {
          std::fill(row, row + wp, 0.0f);
          continue;
        }
        const int64_t lo = std::min<int64_t>(g.pad_w, wp), hi = std::min<int64_t>(wp, g.pad_w + g.W);
        std::fill(row, row + lo, 0.0f);
        std::copy(xc + h * g.W, xc + h * g.W + (hi - lo), row + lo);
        std::fill(row + hi, row + wp, 0.0f);
      }
      bt_planes<M>(d, wp, wp, dt, wp);
      for (int i = 0; i < T; ++i) deal_planes<M>(dt + i * wp, tw, planes + (i * T) * nt + j * tw, nt);
    }
    float* vc = v + c * ld;
    for (int i = 0; i < T; ++i)  // V[i][.] = (B^T d)[i][.] B: plane f = i T + k of V
      bt_planes<M>(planes + (i * T) * nt, nt, nt, vc + (i * T) * fs, fs);
  }
}

// y's M x M tiles of tile rows [r0, r0 + nr) = A^T M A (+ b[k]); m: M[f] (K, ld). planes:
// stage_floats floats: Z (T x M planes: M A, row r's entry c at plane r M + c), then Y (M x M
// planes), each nt long, before Y's values are placed into y's rows.
template <int M>
inline __attribute__((always_inline)) void transform_output_t(const WinoGeom& g, const float* m, int64_t r0,
                                                              int64_t nr, int64_t ld, const float* b, float* y,
                                                              float* planes) {
  constexpr int T = Wino<M>::T;
  const int64_t th = g.tiles_h(), tw = g.tiles_w(), PQ = g.P * g.Q, fs = g.K * ld, nt = nr * tw;
  float* z = planes;
  float* yp = planes + T * M * nt;
  for (int64_t k = 0; k < g.K; ++k) {
    const float bias = b ? b[k] : 0.0f;
    const float* mk = m + k * ld;
    for (int r = 0; r < T; ++r)  // Z[r][.] = M[r][.] A: plane f = r T + c of M
      at_planes<M>(mk + (r * T) * fs, fs, nt, 0.0f, z + (r * M) * nt, nt);
    for (int c = 0; c < M; ++c)  // Y[.][c] = A^T Z[.][c]
      at_planes<M>(z + c * nt, M * nt, nt, bias, yp + c * nt, M * nt);
    for (int64_t j = 0; j < nr; ++j) {
      const int64_t n = (r0 + j) / th, p = M * ((r0 + j) % th);
      float* yk = y + (n * g.K + k) * PQ + p * g.Q;
      for (int r = 0; r < M && p + r < g.P; ++r)
        for (int c = 0; c < M; ++c) {
          const float* src = yp + (r * M + c) * nt + j * tw;
          float* dst = yk + r * g.Q + c;
          const int64_t nq = (g.Q - c + M - 1) / M;  // tiles whose column c is inside y
          for (int64_t q = 0; q < nq; ++q) dst[M * q] = src[q];
        }
    }
  }
}

// E[f] (K, ld) for the tiles of tile rows [r0, r0 + nr): A e A^T of each M x M tile e of dy (zeros
// past P and Q). planes: stage_floats floats: e's values (M x M planes, nt long), then A e (T x M
// planes: row i's entry c at plane i M + c).
template <int M>
inline __attribute__((always_inline)) void transform_dy_t(const WinoGeom& g, const float* dy, int64_t r0,
                                                          int64_t nr, int64_t ld, float* e, float* planes) {
  constexpr int T = Wino<M>::T;
  const int64_t th = g.tiles_h(), tw = g.tiles_w(), PQ = g.P * g.Q, fs = g.K * ld, nt = nr * tw;
  float* ev = planes;
  float* ae = planes + M * M * nt;
  for (int64_t k = 0; k < g.K; ++k) {
    for (int64_t j = 0; j < nr; ++j) {
      const int64_t n = (r0 + j) / th, p = M * ((r0 + j) % th);
      const float* dk = dy + (n * g.K + k) * PQ + p * g.Q;
      for (int r = 0; r < M; ++r)
        for (int c = 0; c < M; ++c) {
          float* dst = ev + (r * M + c) * nt + j * tw;
          const int64_t nq = p + r < g.P ? (g.Q - c + M - 1) / M : 0;  // tiles whose (r, c) is inside dy
          const float* src = dk + r * g.Q + c;
          for (int64_t q = 0; q < nq; ++q) dst[q] = src[M * q];
          std::fill(dst + nq, dst + tw, 0.0f);
        }
    }
    for (int c = 0; c < M; ++c)  // (A e)[.][c] = A e[.][c]
      a_planes<M>(ev + c * nt, M * nt, nt, ae + c * nt, M * nt);
    float* ek = e + k * ld;
    for (int i = 0; i < T; ++i)  // E[i][.] = (A e)[i][.] A^T: plane f = i T + c of E
      a_planes<M>(ae + (i * M) * nt, nt, nt, ek + (i * T) * fs, fs);
  }
}

// dw (K, C, 3, 3) = G^T M G of each (k, c)'s F sums m (M[f] (K, C)).
template <int M>
inline __attribute__((always_inline)) void transform_dw_t(int64_t K, int64_t C, const float* m, float* dw) {
  constexpr int T = Wino<M>::T;
  const int64_t fs = K * C;
  for (int64_t kc = 0; kc < K * C; ++kc) {
    float gm[T][3];  // (G^T M)^T: gm[c][r] = entry r of G^T times column c of M
    for (int c = 0; c < T; ++c) {
      float col[T];
      for (int r = 0; r < T; ++r) col[r] = m[(r * T + c) * fs + kc];
      Wino<M>::gt(col, gm[c]);
    }
    float* o = dw + kc * 9;
    for (int r = 0; r < 3; ++r) {  // row r of (G^T M) G
      float row[T];
      for (int c = 0; c < T; ++c) row[c] = gm[c][r];
      Wino<M>::gt(row, o + r * 3);
    }
  }
}

// The SIMD-cloned entry points, one per tile size.
CNN_SIMD_CLONES void transform_filter(int m, const float* g9, bool rotate, float* u) {
  m == 4 ? transform_filter_t<4>(g9, rotate, u) : transform_filter_t<2>(g9, rotate, u);
}
CNN_SIMD_CLONES void transform_input(const WinoGeom& g, const float* x, int64_t r0, int64_t nr, int64_t ld, float* v,
                                     float* rows) {
  g.m == 4 ? transform_input_t<4>(g, x, r0, nr, ld, v, rows) : transform_input_t<2>(g, x, r0, nr, ld, v, rows);
}
CNN_SIMD_CLONES void transform_output(const WinoGeom& g, const float* m, int64_t r0, int64_t nr, int64_t ld,
                                      const float* b, float* y, float* rows) {
  g.m == 4 ? transform_output_t<4>(g, m, r0, nr, ld, b, y, rows) : transform_output_t<2>(g, m, r0, nr, ld, b, y, rows);
}
CNN_SIMD_CLONES void transform_dy(const WinoGeom& g, const float* dy, int64_t r0, int64_t nr, int64_t ld, float* e,
                                  float* rows) {
  g.m == 4 ? transform_dy_t<4>(g, dy, r0, nr, ld, e, rows) : transform_dy_t<2>(g, dy, r0, nr, ld, e, rows);
}
CNN_SIMD_CLONES void transform_dw(int m, int64_t K, int64_t C, const float* mm, float* dw) {
  m == 4 ? transform_dw_t<4>(K, C, mm, dw) : transform_dw_t<2>(K, C, mm, dw);
}

// One block of `rows` tile rows: its V and M (the filter gradient's V and E), and the transforms'
// scratch (input_floats, stage_floats).
Checked block_floats(const WinoGeom& g, int64_t rows) {
  const int64_t row_floats = std::max(input_floats(g, rows * g.tiles_w()), stage_floats(g, rows * g.tiles_w()));
  return Checked(g.f()) * (g.C + g.K) * (rows * g.tiles_w()) + Checked(row_floats);
}
// Per thread: one block's buffers.
int64_t thread_floats(const WinoGeom& g, int threads) {
  return block_floats(g, rows_per_block(g, threads)).value("conv2d winograd: the scratch");
}
size_t scratch_floats(const WinoGeom& g, int threads) {
  const Checked u = Checked(g.f()) * g.K * g.C;
  return size_t((u + Checked(thread_floats(g, threads)) * threads).value("conv2d winograd: the scratch"));
}

// y = x * filters (+ b): filt(k, c) points at the 3x3 taps of output k and input c, rotated when
// `rotate`. Scratch: U, then one V and one M per thread.
template <typename Filter>
void winograd(const ExecContext& ctx, const WinoGeom& g, const float* x, Filter filt, bool rotate, const float* b,
              float* y) {
  const int threads = std::max(1, ctx.threads());
  const int64_t rb = rows_per_block(g, threads), total = g.N * g.tiles_h(), blocks = (total + rb - 1) / rb;
  const int64_t ld = rb * g.tiles_w(), F = g.f();  // tiles a block holds, products a tile
  std::vector<float> local;
  const size_t count = scratch_floats(g, threads);
  if (!ctx.workspace) local.resize(count);
  float* scratch = ctx.workspace ? ctx.workspace->get(count) : local.data();
  float* u = scratch;
  const int64_t per_thread = thread_floats(g, threads);
  BlasSerialScope blas;
  ParallelErrors errors;  // sgemm_serial checks its sizes
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (int64_t kc = 0; kc < g.K * g.C; ++kc) {
      float uf[36];
      transform_filter(g.m, filt(kc / g.C, kc % g.C), rotate, uf);
      for (int64_t f = 0; f < F; ++f) u[f * g.K * g.C + kc] = uf[f];
    }
    errors.run([&] {  // blocks dealt round-robin: no worksharing construct an exception could leave
      float* v = scratch + F * g.K * g.C + per_thread * omp_get_thread_num();
      float* m = v + F * g.C * ld;
      float* rows = m + F * g.K * ld;
      for (int64_t blk = omp_get_thread_num(); blk < blocks; blk += omp_get_num_threads()) {
        const int64_t r0 = blk * rb, nr = std::min(rb, total - r0), nt = nr * g.tiles_w();
        transform_input(g, x, r0, nr, ld, v, rows);
        for (int64_t f = 0; f < F; ++f)  // M[f] (K, nt) = U[f] (K, C) * V[f] (C, nt)
          sgemm_serial(false, false, g.K, nt, g.C, 1.0f, u + f * g.K * g.C, g.C, v + f * g.C * ld, ld, 0.0f,
                       m + f * g.K * ld, ld);
        transform_output(g, m, r0, nr, ld, b, y, rows);
      }
    });
  }
  errors.rethrow();
}

// The filter gradient's blocks are four times larger: its GEMMs per block have small (K, C)
// outputs and a reduction over the block's tiles, so longer blocks call SGEMM with more work each.
// On fer_cnn's five 3x3 layers (batch 64, 2 threads, 5 repeats, twice, F(2x2, 3x3)): 2 MB blocks took
// 0.8-1.2x im2col's time, 8 MB blocks (at most 4096 tiles) 0.6-0.85x (conv3a 1.05x), 4 and 32 MB mixed.
constexpr int64_t kFilterBlockFloats = kBlockFloats * 4, kFilterMaxTiles = 4096;
int64_t filter_rows_per_block(const WinoGeom& g, int threads) {
  return rows_per_block(g, threads, kFilterBlockFloats, kFilterMaxTiles);
}
// Per thread for the filter gradient: one block's buffers (V, then E where the forward has M) and
// the thread's M (F K C).
int64_t filter_thread_floats(const WinoGeom& g, int threads) {
  return (block_floats(g, filter_rows_per_block(g, threads)) + Checked(g.f()) * g.K * g.C)
      .value("conv2d winograd: the scratch");
}

// dw (K, C, 3, 3) from x (forward geometry g) and dy: every thread sums its blocks (round-robin)
// into its own M, the threads' M are added in thread order, then G^T M G.
void winograd_filter(const ExecContext& ctx, const WinoGeom& g, const float* x, const float* dy, float* dw) {
  const int threads = std::max(1, ctx.threads());
  const int64_t rb = filter_rows_per_block(g, threads), total = g.N * g.tiles_h(), blocks = (total + rb - 1) / rb;
  const int64_t ld = rb * g.tiles_w(), F = g.f();
  const int64_t per_thread = filter_thread_floats(g, threads), mc = F * g.K * g.C;
  std::vector<float> local;
  const size_t count = size_t((Checked(per_thread) * threads).value("conv2d winograd: the scratch"));
  if (!ctx.workspace) local.resize(count);
  float* scratch = ctx.workspace ? ctx.workspace->get(count) : local.data();
  auto thread_m = [&](int t) { return scratch + per_thread * t + F * (g.C + g.K) * ld; };
  const int used = int(std::min<int64_t>(threads, blocks));  // threads that get a block
  BlasSerialScope blas;
  ParallelErrors errors;
#pragma omp parallel num_threads(threads)
  {
    errors.run([&] {
      const int t = omp_get_thread_num();
      float* v = scratch + per_thread * t;
      float* e = v + F * g.C * ld;
      float* m = thread_m(t);
      float* rows = m + mc;
      for (int64_t blk = t; blk < blocks; blk += omp_get_num_threads()) {
        const int64_t r0 = blk * rb, nr = std::min(rb, total - r0), nt = nr * g.tiles_w();
        transform_input(g, x, r0, nr, ld, v, rows);
        transform_dy(g, dy, r0, nr, ld, e, rows);
        const float beta = blk == t ? 0.0f : 1.0f;  // the thread's first block overwrites its M
        for (int64_t f = 0; f < F; ++f)  // M[f] (K, C) += E[f] (K, nt) * V[f] (C, nt)^T
          sgemm_serial(false, true, g.K, g.C, nt, 1.0f, e + f * g.K * ld, ld, v + f * g.C * ld, ld, beta,
                       m + f * g.K * g.C, g.C);
      }
    });
#pragma omp barrier
    if (!errors.failed()) {
      float* m0 = thread_m(0);
#pragma omp for schedule(static)
      for (int64_t i = 0; i < mc; ++i) {
        float acc = m0[i];
        for (int t = 1; t < used; ++t) acc += thread_m(t)[i];
        m0[i] = acc;
      }
    }
  }
  errors.rethrow();
  transform_dw(g.m, g.K, g.C, thread_m(0), dw);
}

WinoGeom forward_geom(const Conv2dShape& sh) {
  return {sh.N, sh.C, sh.H, sh.W, sh.K, sh.P, sh.Q, sh.pad_h, sh.pad_w, wino_m(sh.P, sh.Q)};
}
// dx = dy (N, K, P, Q) convolved with the rotated filters (C outputs, K inputs), padding 2 - pad.
WinoGeom data_geom(const Conv2dShape& sh) {
  return {sh.N, sh.K, sh.P, sh.Q, sh.C, sh.H, sh.W, 2 - sh.pad_h, 2 - sh.pad_w, wino_m(sh.H, sh.W)};
}

void check_winograd(const Conv2dShape& sh) {
  CNN_CHECK(conv2d_cpu_winograd_can_implement(sh),
            "conv2d cpu:winograd takes 3x3, stride 1, dilation 1, groups 1, padding <= 2; got {}", sh.to_string());
}

}  // namespace

bool conv2d_cpu_winograd_can_implement(const Conv2dShape& sh) {
  if (sh.R != 3 || sh.S != 3 || sh.stride_h != 1 || sh.stride_w != 1 || sh.dilation_h != 1 || sh.dilation_w != 1 ||
      sh.groups != 1 || sh.pad_h > 2 || sh.pad_w > 2)
    return false;
  // SGEMM takes int sizes: U (K, C) and each block's V (C, tiles) and M (K, tiles) fit.
  const int64_t lim = int64_t{1} << 31;
  const int64_t tiles = std::max(kMaxTiles, (std::max(sh.W, sh.Q) + 3) / 2);  // a block holds one tile row at least
  return sh.C * sh.K < lim && sh.C * tiles < lim && sh.K * tiles < lim;
}

// Eligible layers with enough channels that 16 GEMMs of (K, C) beat im2col's one of (K, 9 C), and
// outputs at least 8x8: on fer_cnn's 48x48, 24x24 and 12x12 layers (C, K 64 to 256, batch 64, 2
// threads, interleaved with im2col) forward took 0.65-0.9x im2col's time and dx 0.65-1.05x; smaller
// outputs (fewer, more ragged tiles) are unmeasured and stay on im2col.
// And enough 4x4 output tiles a call: the filters are transformed once a call and each of the 36
// GEMMs is (K, C) by (C, tiles), so a call of few tiles (inference on one face) pays the transform
// for little work and runs narrow GEMMs. vgg_fer's layers at batch 1 to 64 (2 threads, every
// direction, bench/RESULTS.md, session 15): where the tiles cover the output exactly (20x20,
// 40x40) Winograd wins from about 100 tiles (batch 1 at 20x20, 25 tiles: im2col 2.3x faster
// forward; batch 4, 100 tiles: a tie to 1.3x for Winograd); where they overhang it (10x10 in 3x3
// tiles of 4: 69% of the tiles' outputs used) im2col wins up to 288 tiles (batch 32) and
// Winograd from 576 (batch 64).
bool conv2d_cpu_winograd_is_default(const Conv2dShape& sh) {
  if (!(conv2d_cpu_winograd_can_implement(sh) && sh.C >= 16 && sh.K >= 16 && sh.pad_h <= 1 && sh.pad_w <= 1 &&
        sh.P >= 8 && sh.Q >= 8))
    return false;
  const int64_t tiles_p = (sh.P + 3) / 4, tiles_q = (sh.Q + 3) / 4, tiles = sh.N * tiles_p * tiles_q;
  const bool exact = sh.P * sh.Q * 100 >= tiles_p * tiles_q * 16 * 85;  // at least 85% of the tiles' outputs used
  return tiles >= (exact ? 100 : 512);
}

size_t conv2d_cpu_winograd_workspace_bytes(const ExecContext& ctx, const Conv2dShape& sh, bool data) {
  const WinoGeom g = data ? data_geom(sh) : forward_geom(sh);
  return checked_bytes(Checked(int64_t(scratch_floats(g, std::max(1, ctx.threads())))), sizeof(float),
                       "conv2d winograd workspace");
}

size_t conv2d_cpu_winograd_filter_workspace_bytes(const ExecContext& ctx, const Conv2dShape& sh) {
  const int threads = std::max(1, ctx.threads());
  return checked_bytes(Checked(filter_thread_floats(forward_geom(sh), threads)) * threads, sizeof(float),
                       "conv2d winograd workspace");
}

void conv2d_forward_cpu_winograd(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                 const float* b, float* y) {
  check_winograd(sh);
  CNN_CHECK(!sh.has_bias || b, "conv2d: the shape has a bias but b is null");
  const int64_t C = sh.C;
  winograd(ctx, forward_geom(sh), x, [w, C](int64_t k, int64_t c) { return w + (k * C + c) * 9; }, false,
           sh.has_bias ? b : nullptr, y);
}

void conv2d_backward_cpu_winograd(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w,
                                  const float* dy, float* dx, float* dw, float* db) {
  check_winograd(sh);
  if (dx) {
    const int64_t C = sh.C;  // output c of the data convolution reads filter (k, c) rotated
    winograd(ctx, data_geom(sh), dy, [w, C](int64_t c, int64_t k) { return w + (k * C + c) * 9; }, true, nullptr,
             dx);
  }
  if (dw) winograd_filter(ctx, forward_geom(sh), x, dy, dw);
  if (db) conv2d_backward_cpu(ctx, sh, x, w, dy, nullptr, nullptr, db);
}

}  // namespace cnn
