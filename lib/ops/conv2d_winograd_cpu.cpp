// Winograd F(2x2, 3x3) convolution on the CPU (Lavin & Gray 2016), the "cpu:winograd" rows: 3x3,
// stride 1, dilation 1, groups 1, padding at most 2. Each 4x4 input tile becomes 16 values per
// channel (V = B^T d B), the filters 16 per channel pair (U = G g G^T), and the 16 products
// M[f] (K, T) = U[f] (K, C) * V[f] (C, T) are single-threaded SGEMMs over a block of T tiles taken
// from one or several images; y's 2x2 output tiles are A^T M A. backward_data is the same algorithm
// on dy with the filters rotated and channels swapped, padding 2 - pad. backward_filter is its
// transpose, F(3x3, 2x2): dw (3x3) = G^T [sum over tiles of (A e A^T) (.) (B^T d B)] G, e a 2x2 tile
// of dy and d the 4x4 tile of x the forward reads for it, so the 16 products are
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
// P = H + 2 pad_h - 2, Q = W + 2 pad_w - 2.
struct WinoGeom {
  int64_t N, C, H, W, K, P, Q, pad_h, pad_w;
  int64_t tiles_h() const { return (P + 1) / 2; }
  int64_t tiles_w() const { return (Q + 1) / 2; }
  int64_t tiles() const { return N * tiles_h() * tiles_w(); }
};

// Tile rows per SGEMM block: the block's V and M (16 (C + K) floats a tile) within about 2 MB, at
// least 64 and at most 1024 tiles (one tile row at least), the blocks cut evenly, a multiple of the
// thread count of them.
constexpr int64_t kBlockFloats = int64_t{1} << 19, kMinTiles = 64, kMaxTiles = 1024;
int64_t rows_per_block(const WinoGeom& g, int threads, int64_t block_floats = kBlockFloats,
                       int64_t max_tiles = kMaxTiles) {
  const int64_t want_tiles = std::clamp<int64_t>(block_floats / (16 * (g.C + g.K)), kMinTiles, max_tiles);
  const int64_t total = g.N * g.tiles_h(), want = std::max<int64_t>(1, want_tiles / g.tiles_w());
  int64_t blocks = (total + want - 1) / want;
  blocks = std::min(total, (blocks + threads - 1) / threads * threads);
  return (total + blocks - 1) / blocks;
}

// U (16, K, C) = G g G^T of each 3x3 filter g, read through filt(k, c) (a pointer to 9 taps, row
// major, and a flag to read them rotated by 180 degrees).
// G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1].
CNN_SIMD_CLONES void transform_filter(const float* g9, bool rotate, float* u16) {
  float g[9];
  for (int i = 0; i < 9; ++i) g[i] = g9[rotate ? 8 - i : i];
  float t[4][3];  // G g
  for (int j = 0; j < 3; ++j) {
    t[0][j] = g[j];
    t[1][j] = 0.5f * (g[j] + g[3 + j] + g[6 + j]);
    t[2][j] = 0.5f * (g[j] - g[3 + j] + g[6 + j]);
    t[3][j] = g[6 + j];
  }
  for (int i = 0; i < 4; ++i) {  // (G g) G^T
    u16[i * 4 + 0] = t[i][0];
    u16[i * 4 + 1] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
    u16[i * 4 + 2] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
    u16[i * 4 + 3] = t[i][2];
  }
}

// V[f] (C, ld) for the tiles of tile rows [r0, r0 + nr) (tile row: image n, output rows 2 tp, 2 tp + 1;
// TW tiles each, row j's tiles at columns j TW ...): B^T d B of each 4x4 input tile d (zeros outside
// x), B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. B^T on whole padded rows first, then B along
// them, so both steps are loops over contiguous (or stride-2) floats. rows: 4 (2 TW + 2) floats.
CNN_SIMD_CLONES void transform_input(const WinoGeom& g, const float* x, int64_t r0, int64_t nr, int64_t ld,
                                     float* v, float* rows) {
  const int64_t th = g.tiles_h(), tw = g.tiles_w(), wp = 2 * tw + 2, HW = g.H * g.W, fs = g.C * ld;
  float* d = rows;  // 4 padded input rows, then B^T of them in place
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t j = 0; j < nr; ++j) {
      const int64_t n = (r0 + j) / th, h0 = 2 * ((r0 + j) % th) - g.pad_h;
      const float* xc = x + (n * g.C + c) * HW;
      for (int i = 0; i < 4; ++i) {
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
      float* d0 = d;
      float* d1 = d + wp;
      float* d2 = d + 2 * wp;
      float* d3 = d + 3 * wp;
      for (int64_t s = 0; s < wp; ++s) {
        const float a0 = d0[s], a1 = d1[s], a2 = d2[s], a3 = d3[s];
        d0[s] = a0 - a2, d1[s] = a1 + a2, d2[s] = a2 - a1, d3[s] = a1 - a3;
      }
      float* out = v + c * ld + j * tw;
      for (int i = 0; i < 4; ++i) {
        const float* t = d + i * wp;
        float* o0 = out + (i * 4) * fs;
        float* o1 = o0 + fs;
        float* o2 = o1 + fs;
        float* o3 = o2 + fs;
        for (int64_t q = 0; q < tw; ++q) {
          const float e0 = t[2 * q], e1 = t[2 * q + 1], e2 = t[2 * q + 2], e3 = t[2 * q + 3];
          o0[q] = e0 - e2, o1[q] = e1 + e2, o2[q] = e2 - e1, o3[q] = e1 - e3;
        }
      }
    }
}

// y's 2x2 tiles of tile rows [r0, r0 + nr) = A^T M A (+ b[k]), A^T = [1 1 1 0; 0 1 -1 -1];
// m: M[f] (K, ld). rows: 2 (2 TW) floats.
CNN_SIMD_CLONES void transform_output(const WinoGeom& g, const float* m, int64_t r0, int64_t nr, int64_t ld,
                                      const float* b, float* y, float* rows) {
  const int64_t th = g.tiles_h(), tw = g.tiles_w(), PQ = g.P * g.Q, fs = g.K * ld;
  float* y0 = rows;
  float* y1 = rows + 2 * tw;
  for (int64_t k = 0; k < g.K; ++k) {
    const float bias = b ? b[k] : 0.0f;
    for (int64_t j = 0; j < nr; ++j) {
      const int64_t n = (r0 + j) / th, p = 2 * ((r0 + j) % th);
      const float* mk = m + k * ld + j * tw;
      for (int64_t q = 0; q < tw; ++q) {
        float a0[4], a1[4];  // M A, row by row
        for (int r = 0; r < 4; ++r) {
          const float m0 = mk[(r * 4) * fs + q], m1 = mk[(r * 4 + 1) * fs + q], m2 = mk[(r * 4 + 2) * fs + q],
                      m3 = mk[(r * 4 + 3) * fs + q];
          a0[r] = m0 + m1 + m2;
          a1[r] = m1 - m2 - m3;
        }
        y0[2 * q] = a0[0] + a0[1] + a0[2] + bias;
        y0[2 * q + 1] = a1[0] + a1[1] + a1[2] + bias;
        y1[2 * q] = a0[1] - a0[2] - a0[3] + bias;
        y1[2 * q + 1] = a1[1] - a1[2] - a1[3] + bias;
      }
      float* yk = y + (n * g.K + k) * PQ + p * g.Q;
      std::copy(y0, y0 + g.Q, yk);
      if (p + 1 < g.P) std::copy(y1, y1 + g.Q, yk + g.Q);
    }
  }
}

// One block of `rows` tile rows: its V and M (the filter gradient's V and E), and the transforms'
// row buffers.
Checked block_floats(const WinoGeom& g, int64_t rows) {
  return Checked(16) * (g.C + g.K) * (rows * g.tiles_w()) + Checked(4) * (2 * g.tiles_w() + 2);
}
// Per thread: one block's buffers.
int64_t thread_floats(const WinoGeom& g, int threads) {
  return block_floats(g, rows_per_block(g, threads)).value("conv2d winograd: the scratch");
}
size_t scratch_floats(const WinoGeom& g, int threads) {
  const Checked u = Checked(16) * g.K * g.C;
  return size_t((u + Checked(thread_floats(g, threads)) * threads).value("conv2d winograd: the scratch"));
}

// y = x * filters (+ b): filt(k, c) points at the 3x3 taps of output k and input c, rotated when
// `rotate`. Scratch: U, then one V and one M per thread.
template <typename Filter>
void winograd(const ExecContext& ctx, const WinoGeom& g, const float* x, Filter filt, bool rotate, const float* b,
              float* y) {
  const int threads = std::max(1, ctx.threads());
  const int64_t rb = rows_per_block(g, threads), total = g.N * g.tiles_h(), blocks = (total + rb - 1) / rb;
  const int64_t ld = rb * g.tiles_w();  // tiles a block holds
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
      float u16[16];
      transform_filter(filt(kc / g.C, kc % g.C), rotate, u16);
      for (int f = 0; f < 16; ++f) u[f * g.K * g.C + kc] = u16[f];
    }
    errors.run([&] {  // blocks dealt round-robin: no worksharing construct an exception could leave
      float* v = scratch + 16 * g.K * g.C + per_thread * omp_get_thread_num();
      float* m = v + 16 * g.C * ld;
      float* rows = m + 16 * g.K * ld;
      for (int64_t blk = omp_get_thread_num(); blk < blocks; blk += omp_get_num_threads()) {
        const int64_t r0 = blk * rb, nr = std::min(rb, total - r0), nt = nr * g.tiles_w();
        transform_input(g, x, r0, nr, ld, v, rows);
        for (int f = 0; f < 16; ++f)  // M[f] (K, nt) = U[f] (K, C) * V[f] (C, nt)
          sgemm_serial(false, false, g.K, nt, g.C, 1.0f, u + f * g.K * g.C, g.C, v + f * g.C * ld, ld, 0.0f,
                       m + f * g.K * ld, ld);
        transform_output(g, m, r0, nr, ld, b, y, rows);
      }
    });
  }
  errors.rethrow();
}

// E[f] (K, ld) for the tiles of tile rows [r0, r0 + nr): A e A^T of each 2x2 tile e of dy (zeros
// past P and Q), A = [1 0; 1 1; 1 -1; 0 -1] (the transpose of the forward's A^T). rows: 2 (2 TW)
// floats.
CNN_SIMD_CLONES void transform_dy(const WinoGeom& g, const float* dy, int64_t r0, int64_t nr, int64_t ld, float* e,
                                  float* rows) {
  const int64_t th = g.tiles_h(), tw = g.tiles_w(), PQ = g.P * g.Q, fs = g.K * ld;
  float* e0 = rows;
  float* e1 = rows + 2 * tw;
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t j = 0; j < nr; ++j) {
      const int64_t n = (r0 + j) / th, p = 2 * ((r0 + j) % th);
      const float* dk = dy + (n * g.K + k) * PQ + p * g.Q;
      std::copy(dk, dk + g.Q, e0);
      std::fill(e0 + g.Q, e0 + 2 * tw, 0.0f);
      if (p + 1 < g.P) std::copy(dk + g.Q, dk + 2 * g.Q, e1);
      else std::fill(e1, e1 + g.Q, 0.0f);
      std::fill(e1 + g.Q, e1 + 2 * tw, 0.0f);
      float* out = e + k * ld + j * tw;
      for (int64_t q = 0; q < tw; ++q) {
        const float a0 = e0[2 * q], a1 = e0[2 * q + 1], b0 = e1[2 * q], b1 = e1[2 * q + 1];
        const float t[4][2] = {{a0, a1}, {a0 + b0, a1 + b1}, {a0 - b0, a1 - b1}, {-b0, -b1}};  // A e
        for (int i = 0; i < 4; ++i) {  // (A e) A^T
          float* o = out + (i * 4) * fs + q;
          o[0] = t[i][0];
          o[fs] = t[i][0] + t[i][1];
          o[2 * fs] = t[i][0] - t[i][1];
          o[3 * fs] = -t[i][1];
        }
      }
    }
}

// dw (K, C, 3, 3) = G^T M G of each (k, c)'s 16 sums m (M[f] (K, C)), G^T = [1 .5 .5 0; 0 .5 -.5 0;
// 0 .5 .5 1].
CNN_SIMD_CLONES void transform_dw(int64_t K, int64_t C, const float* m, float* dw) {
  const int64_t fs = K * C;
  for (int64_t kc = 0; kc < K * C; ++kc) {
    float t[3][4];  // G^T M
    for (int j = 0; j < 4; ++j) {
      const float m0 = m[j * fs + kc], m1 = m[(4 + j) * fs + kc], m2 = m[(8 + j) * fs + kc], m3 = m[(12 + j) * fs + kc];
      t[0][j] = m0 + 0.5f * (m1 + m2);
      t[1][j] = 0.5f * (m1 - m2);
      t[2][j] = 0.5f * (m1 + m2) + m3;
    }
    float* o = dw + kc * 9;
    for (int i = 0; i < 3; ++i) {  // (G^T M) G
      o[i * 3 + 0] = t[i][0] + 0.5f * (t[i][1] + t[i][2]);
      o[i * 3 + 1] = 0.5f * (t[i][1] - t[i][2]);
      o[i * 3 + 2] = 0.5f * (t[i][1] + t[i][2]) + t[i][3];
    }
  }
}

// The filter gradient's blocks are four times larger: its 16 GEMMs per block have small (K, C)
// outputs and a reduction over the block's tiles, so longer blocks call SGEMM with more work each.
// On fer_cnn's five 3x3 layers (batch 64, 2 threads, 5 repeats, twice): 2 MB blocks took 0.8-1.2x
// im2col's time, 8 MB blocks (at most 4096 tiles) 0.6-0.85x (conv3a 1.05x), 4 and 32 MB mixed.
constexpr int64_t kFilterBlockFloats = kBlockFloats * 4, kFilterMaxTiles = 4096;
int64_t filter_rows_per_block(const WinoGeom& g, int threads) {
  return rows_per_block(g, threads, kFilterBlockFloats, kFilterMaxTiles);
}
// Per thread for the filter gradient: one block's buffers (V, then E where the forward has M) and
// the thread's M (16 K C).
int64_t filter_thread_floats(const WinoGeom& g, int threads) {
  return (block_floats(g, filter_rows_per_block(g, threads)) + Checked(16) * g.K * g.C)
      .value("conv2d winograd: the scratch");
}

// dw (K, C, 3, 3) from x (forward geometry g) and dy: every thread sums its blocks (round-robin)
// into its own M, the threads' M are added in thread order, then G^T M G.
void winograd_filter(const ExecContext& ctx, const WinoGeom& g, const float* x, const float* dy, float* dw) {
  const int threads = std::max(1, ctx.threads());
  const int64_t rb = filter_rows_per_block(g, threads), total = g.N * g.tiles_h(), blocks = (total + rb - 1) / rb;
  const int64_t ld = rb * g.tiles_w();
  const int64_t per_thread = filter_thread_floats(g, threads), mc = 16 * g.K * g.C;
  std::vector<float> local;
  const size_t count = size_t((Checked(per_thread) * threads).value("conv2d winograd: the scratch"));
  if (!ctx.workspace) local.resize(count);
  float* scratch = ctx.workspace ? ctx.workspace->get(count) : local.data();
  auto thread_m = [&](int t) { return scratch + per_thread * t + 16 * (g.C + g.K) * ld; };
  const int used = int(std::min<int64_t>(threads, blocks));  // threads that get a block
  BlasSerialScope blas;
  ParallelErrors errors;
#pragma omp parallel num_threads(threads)
  {
    errors.run([&] {
      const int t = omp_get_thread_num();
      float* v = scratch + per_thread * t;
      float* e = v + 16 * g.C * ld;
      float* m = thread_m(t);
      float* rows = m + mc;
      for (int64_t blk = t; blk < blocks; blk += omp_get_num_threads()) {
        const int64_t r0 = blk * rb, nr = std::min(rb, total - r0), nt = nr * g.tiles_w();
        transform_input(g, x, r0, nr, ld, v, rows);
        transform_dy(g, dy, r0, nr, ld, e, rows);
        const float beta = blk == t ? 0.0f : 1.0f;  // the thread's first block overwrites its M
        for (int f = 0; f < 16; ++f)  // M[f] (K, C) += E[f] (K, nt) * V[f] (C, nt)^T
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
  transform_dw(g.K, g.C, thread_m(0), dw);
}

WinoGeom forward_geom(const Conv2dShape& sh) {
  return {sh.N, sh.C, sh.H, sh.W, sh.K, sh.P, sh.Q, sh.pad_h, sh.pad_w};
}
// dx = dy (N, K, P, Q) convolved with the rotated filters (C outputs, K inputs), padding 2 - pad.
WinoGeom data_geom(const Conv2dShape& sh) {
  return {sh.N, sh.K, sh.P, sh.Q, sh.C, sh.H, sh.W, 2 - sh.pad_h, 2 - sh.pad_w};
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
bool conv2d_cpu_winograd_is_default(const Conv2dShape& sh) {
  return conv2d_cpu_winograd_can_implement(sh) && sh.C >= 16 && sh.K >= 16 && sh.pad_h <= 1 && sh.pad_w <= 1 &&
         sh.P >= 8 && sh.Q >= 8;
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
