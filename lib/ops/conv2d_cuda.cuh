// Device building blocks of conv2d_cuda.cu: division by run-time constants, a register-blocked
// FP32 GEMM main loop over double-buffered shared-memory tiles whose operands are read by loaders
// (implicit GEMM: the im2col matrix is never written out), the kernels' parameters, the decoders
// that turn GEMM indices into tensor offsets, and the NCHW epilogue.
// Trap: loaders turn every out-of-range row, column or tap into a zero, so tails need no special
// case; a gathered element is read only when its h and w fall inside the source plane.
#pragma once

#include <cstdint>

namespace cnn::conv2d_cuda_detail {

// n / d and n % d for 0 <= n < 2^31 with one multiply-high (Granlund & Montgomery, "Division by
// invariant integers using multiplication", 1994): m = floor(2^32 (2^l - d) / d) + 1, l = ceil(log2 d),
// q = (mulhi(n, m) + n) >> l. Dividends below 2^31 keep the sum inside 32 bits.
struct FastDivmod {
  int d = 1;
  uint32_t mul = 1;
  uint32_t shift = 0;

  FastDivmod() = default;
  explicit FastDivmod(int divisor) : d(divisor) {  // host side; divisor >= 1
    while ((uint64_t(1) << shift) < uint64_t(divisor)) ++shift;
    mul = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - uint64_t(divisor))) / uint64_t(divisor) + 1);
  }
  __device__ __forceinline__ int div(int n) const {
    return int((__umulhi(uint32_t(n), mul) + uint32_t(n)) >> shift);
  }
  __device__ __forceinline__ void divmod(int n, int& q, int& r) const {
    q = div(n);
    r = n - q * d;
  }
};

// Where one gathered value lives: an offset, and the row h and column w it lands on in its plane.
// A tap and a column each carry a part; their sums are checked against the plane's bounds.
struct Tap {
  int off, h, w;
};
// Added to h, this keeps any sum with a real tap negative, so the element reads as zero.
constexpr int kInvalidH = -(1 << 30);

// Block tile BM x BN, reduction step BK, per-thread micro-tile TM x TN (in groups of 4 rows or
// columns spread evenly over the tile), 256 threads. Shared rows are padded by 4 floats: stores
// whose lanes walk the reduction then hit 32 distinct banks, and rows stay 16-byte aligned.
template <int BM_, int BN_, int BK_, int TM_, int TN_>
struct TileConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
  static constexpr int kThreadsM = BM / TM, kThreadsN = BN / TN;
  static constexpr int kThreads = kThreadsM * kThreadsN;
  static constexpr int kLdA = BM + 4, kLdB = BN + 4;
  static constexpr int kSmemFloats = 2 * BK * (kLdA + kLdB);
  static_assert(kThreads == 256, "launch helpers assume 256 threads");
  static_assert(TM % 4 == 0 && TN % 4 == 0, "micro-tiles are read as float4");
  static_assert(kThreadsN % 8 == 0 && kThreadsM % 4 == 0, "a warp covers 4 x 8 threads of the tile");
  static_assert((BM * BK) % kThreads == 0 && (BN * BK) % kThreads == 0, "loads split evenly");
  static_assert(kThreads % BK == 0, "loaders give each thread one reduction row");
};
using BigTile = TileConfig<128, 128, 8, 8, 8>;
using MidTile = TileConfig<64, 128, 16, 4, 8>;
using SmallTile = TileConfig<64, 64, 16, 4, 4>;

// A warp holds 4 x 8 threads of the tile, so one float4 fragment read touches 4 (A) or 8 (B)
// distinct 16-byte words: one shared-memory wavefront each.
template <class Cfg>
__device__ __forceinline__ void thread_coords(int& ty, int& tx) {
  constexpr int kWarpsN = Cfg::kThreadsN / 8;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  ty = (warp / kWarpsN) * 4 + lane / 8;
  tx = (warp % kWarpsN) * 8 + lane % 8;
}
// Tile row of accumulator row i (and column of accumulator column j, with BN, TN).
template <int B, int T>
__device__ __forceinline__ int micro_index(int t, int i) {
  return (i / 4) * (B / (T / 4)) + t * 4 + i % 4;
}

// Element (m, red) of an M x Kred operand at src[m * ld + delta(red)], decode.delta giving
// delta. Lanes walk the reduction (coalesced where it is contiguous); each thread keeps one
// reduction row of the tile and Rows * BK / 256 of its rows.
template <class Cfg, int Rows, class Decode>
struct RowLoader {
  static constexpr int kStep = Cfg::kThreads / Cfg::BK;
  static constexpr int kCount = Rows / kStep;
  const float* src;
  Decode decode;
  int kk, red_begin, red_end;
  int row_off[kCount];  // m * ld, or -1 past the last row

  __device__ __forceinline__ RowLoader(const float* src_, int ld, int m0, int M, int red_begin_, int red_end_,
                                       const Decode& decode_)
      : src(src_), decode(decode_), kk(int(threadIdx.x) % Cfg::BK), red_begin(red_begin_), red_end(red_end_) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int m = m0 + int(threadIdx.x) / Cfg::BK + i * kStep;
      row_off[i] = m < M ? m * ld : -1;
    }
  }
  __device__ __forceinline__ void load(int kt, float (&r)[kCount]) const {
    const int red = red_begin + kt * Cfg::BK + kk;
    const bool ok = red < red_end;
    const int delta = ok ? decode.delta(red) : 0;
#pragma unroll
    for (int i = 0; i < kCount; ++i) r[i] = (ok && row_off[i] >= 0) ? __ldg(src + row_off[i] + delta) : 0.0f;
  }
  __device__ __forceinline__ void store(const float (&r)[kCount], float* tile) const {  // tile [BK][Rows + 4]
#pragma unroll
    for (int i = 0; i < kCount; ++i) tile[kk * (Rows + 4) + int(threadIdx.x) / Cfg::BK + i * kStep] = r[i];
  }
};

// RowLoader for a row-major M x Kred matrix (delta(red) = red) read as float4: needs ld % 4 == 0,
// a 16-byte aligned src, red_begin % 4 == 0 and red_end == Kred (whole float4s in or out).
template <class Cfg, int Rows>
struct VecRowLoader {
  static constexpr int kQuads = Cfg::BK / 4;  // float4s per tile row
  static constexpr int kStep = Cfg::kThreads / kQuads;
  static constexpr int kCount = Rows / kStep;
  static_assert(kCount >= 1, "tile too small for one float4 per thread");
  const float* src;
  int kq, red_begin, red_end;
  int row_off[kCount];

  __device__ __forceinline__ VecRowLoader(const float* src_, int ld, int m0, int M, int red_begin_, int red_end_)
      : src(src_), kq(int(threadIdx.x) % kQuads), red_begin(red_begin_), red_end(red_end_) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int m = m0 + int(threadIdx.x) / kQuads + i * kStep;
      row_off[i] = m < M ? m * ld : -1;
    }
  }
  __device__ __forceinline__ void load(int kt, float4 (&r)[kCount]) const {
    const int red = red_begin + kt * Cfg::BK + kq * 4;
    const bool ok = red < red_end;
#pragma unroll
    for (int i = 0; i < kCount; ++i)
      r[i] = (ok && row_off[i] >= 0) ? __ldg(reinterpret_cast<const float4*>(src + row_off[i] + red))
                                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  __device__ __forceinline__ void store(const float4 (&r)[kCount], float* tile) const {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      float* t = tile + (kq * 4) * (Rows + 4) + int(threadIdx.x) / kQuads + i * kStep;
      t[0] = r[i].x;
      t[Rows + 4] = r[i].y;
      t[2 * (Rows + 4)] = r[i].z;
      t[3 * (Rows + 4)] = r[i].w;
    }
  }
};

// Element (red, col) of a gathered Kred x Cols operand: with t = decode.tap(red) and c the
// column's Tap (from ColumnDecode, once per kernel), src[c.off + t.off] when
// 0 <= c.h + t.h < h_lim and 0 <= c.w + t.w < w_lim, else 0. kAlongCols: lanes take consecutive
// columns (coalesced when columns are contiguous pixels), else consecutive reduction rows.
template <class Cfg, int Cols, bool kAlongCols, class Decode>
struct GatherLoader {
  static constexpr int kStep = Cfg::kThreads / Cfg::BK;
  static constexpr int kCount = Cols / kStep;
  const float* src;
  Decode decode;
  int kk, red_begin, red_end, h_lim, w_lim;
  int col_off[kCount], col_h[kCount], col_w[kCount];

  __device__ __forceinline__ static int local_col(int i) {
    return (kAlongCols ? int(threadIdx.x) % kStep : int(threadIdx.x) / Cfg::BK) + i * kStep;
  }
  template <class ColumnDecode>
  __device__ __forceinline__ GatherLoader(const float* src_, int n0, int ncols, int red_begin_, int red_end_,
                                          int h_lim_, int w_lim_, const Decode& decode_, const ColumnDecode& cols)
      : src(src_),
        decode(decode_),
        kk(kAlongCols ? int(threadIdx.x) / kStep : int(threadIdx.x) % Cfg::BK),
        red_begin(red_begin_),
        red_end(red_end_),
        h_lim(h_lim_),
        w_lim(w_lim_) {
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int col = n0 + local_col(i);
      const Tap t = col < ncols ? cols.column(col) : Tap{0, kInvalidH, 0};
      col_off[i] = t.off, col_h[i] = t.h, col_w[i] = t.w;
    }
  }
  __device__ __forceinline__ void load(int kt, float (&r)[kCount]) const {
    const int red = red_begin + kt * Cfg::BK + kk;
    const Tap t = red < red_end ? decode.tap(red) : Tap{0, kInvalidH, 0};
#pragma unroll
    for (int i = 0; i < kCount; ++i) {
      const int h = col_h[i] + t.h, w = col_w[i] + t.w;
      r[i] = (unsigned(h) < unsigned(h_lim) && unsigned(w) < unsigned(w_lim)) ? __ldg(src + col_off[i] + t.off) : 0.0f;
    }
  }
  __device__ __forceinline__ void store(const float (&r)[kCount], float* tile) const {  // tile [BK][Cols + 4]
#pragma unroll
    for (int i = 0; i < kCount; ++i) tile[kk * (Cols + 4) + local_col(i)] = r[i];
  }
};

// acc (TM x TN) = A (BM x Kred) * B (Kred x BN) over num_tiles steps of BK. Loaders fill the
// other buffer from registers while the current one is multiplied, so one barrier a step
// suffices. Each accumulator sums its products in reduction order (deterministic).
template <class Cfg, class ALoader, class BLoader, class ARegs, class BRegs>
__device__ __forceinline__ void gemm_mainloop(const ALoader& a, const BLoader& b, int num_tiles, int ty, int tx,
                                              float (&acc)[Cfg::TM][Cfg::TN], float* smem, ARegs& ra, BRegs& rb) {
  float* const As = smem;                           // [2][BK][kLdA]
  float* const Bs = smem + 2 * Cfg::BK * Cfg::kLdA;  // [2][BK][kLdB]
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::TN; ++j) acc[i][j] = 0.0f;
  if (num_tiles <= 0) return;
  a.load(0, ra);
  b.load(0, rb);
  a.store(ra, As);
  b.store(rb, Bs);
  __syncthreads();
  for (int kt = 0; kt < num_tiles; ++kt) {
    const int cur = kt & 1;
    const bool more = kt + 1 < num_tiles;
    if (more) {
      a.load(kt + 1, ra);
      b.load(kt + 1, rb);
    }
    const float* at = As + cur * Cfg::BK * Cfg::kLdA;
    const float* bt = Bs + cur * Cfg::BK * Cfg::kLdB;
#pragma unroll
    for (int kk = 0; kk < Cfg::BK; ++kk) {
      float af[Cfg::TM], bf[Cfg::TN];
#pragma unroll
      for (int i = 0; i < Cfg::TM; i += 4) {
        const float4 v =
            *reinterpret_cast<const float4*>(at + kk * Cfg::kLdA + micro_index<Cfg::BM, Cfg::TM>(ty, i));
        af[i] = v.x, af[i + 1] = v.y, af[i + 2] = v.z, af[i + 3] = v.w;
      }
#pragma unroll
      for (int j = 0; j < Cfg::TN; j += 4) {
        const float4 v =
            *reinterpret_cast<const float4*>(bt + kk * Cfg::kLdB + micro_index<Cfg::BN, Cfg::TN>(tx, j));
        bf[j] = v.x, bf[j + 1] = v.y, bf[j + 2] = v.z, bf[j + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::TN; ++j) acc[i][j] = fmaf(af[i], bf[j], acc[i][j]);
    }
    if (more) {
      a.store(ra, As + (cur ^ 1) * Cfg::BK * Cfg::kLdA);
      b.store(rb, Bs + (cur ^ 1) * Cfg::BK * Cfg::kLdB);
    }
    __syncthreads();
  }
}

// Sum of v over a 256-thread block in a fixed order (shuffle tree, then warps in order); the
// result is valid in thread 0. `scratch` holds 8 floats; the block must call it together.
__device__ __forceinline__ float block_sum_256(float v, float* scratch) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x == 0)
#pragma unroll
    for (int w = 0; w < 8; ++w) total += scratch[w];
  __syncthreads();
  return total;
}

// ---- kernel parameters (the shape in int32) and operand decoders of conv2d_cuda.cu ----

// The shape in int32 (can_implement checks that every index fits).
struct ConvDims {
  int N, C, H, W, K, R, S, P, Q;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  int groups, Cg, Kg, HW, PQ, RS, Crs;
};

// Reduction over the filter window: crs = (c, r, s) -> the input element under tap (r, s) of
// channel c, relative to the window's top-left corner.
struct WindowDecode {
  FastDivmod div_rs, div_s;
  int HW, W, dil_h, dil_w;
  __device__ __forceinline__ Tap tap(int crs) const {
    int c, rs, r, s;
    div_rs.divmod(crs, c, rs);
    div_s.divmod(rs, r, s);
    const int dh = r * dil_h, dw = s * dil_w;
    return Tap{c * HW + dh * W + dw, dh, dw};
  }
  __device__ __forceinline__ Tap column(int crs) const { return tap(crs); }
};

// Output pixel npq = (n, p, q) -> the top-left corner of its window in the input (may be padding).
struct PixelDecode {
  FastDivmod div_pq, div_q;
  int CHW, W, stride_h, stride_w, pad_h, pad_w;
  __device__ __forceinline__ Tap tap(int npq) const {
    int n, pq, p, q;
    div_pq.divmod(npq, n, pq);
    div_q.divmod(pq, p, q);
    const int h0 = p * stride_h - pad_h, w0 = q * stride_w - pad_w;
    return Tap{n * CHW + h0 * W + w0, h0, w0};
  }
  __device__ __forceinline__ Tap column(int npq) const { return tap(npq); }
};

struct IdentityDelta {
  __device__ __forceinline__ int delta(int red) const { return red; }
};

// Forward: y_g (Kg, N*P*Q) = w_g (Kg, Crs) * im2col(x_g) (Crs, N*P*Q).
struct ForwardParams {
  ConvDims d;
  WindowDecode window;
  PixelDecode pixel;
  FastDivmod div_pq;
  int ncols;        // N * P * Q
  int splits;       // of the reduction Crs (blockIdx.z = group * splits + split)
  int chunk;        // reduction length of one split, a multiple of BK
  bool has_bias;
  bool vec_store;   // P*Q % 4 == 0 and the output 16-byte aligned
};

// Data gradient of one residue class (see conv2d_backward_data_implicit_gemm_kernel).
struct DataParams {
  ConvDims d;
  int ah, aw, Hc, Wc, r0, s0, Tr, Ts, step_p, step_q, base_p, base_q;
  int kred;   // Kg * nR * nS (0 when no tap reaches this class: dx there is 0)
  int ncols;  // N * Hc * Wc
  bool vec_store;
  FastDivmod div_taps, div_ns, div_hcwc, div_wc;
};

// A: w_g viewed as (Cg, Kg*nR*nS): element (c, (k, jr, js)) at c*RS + k*Cg*RS + r*S + s.
struct DataWeightDelta {
  FastDivmod div_taps, div_ns;
  int CgRS, S, r0, s0, Tr, Ts;
  __device__ __forceinline__ int delta(int red) const {
    int k, j, jr, js;
    div_taps.divmod(red, k, j);
    div_ns.divmod(j, jr, js);
    return k * CgRS + (r0 + jr * Tr) * S + s0 + js * Ts;
  }
};

// B rows: (k, jr, js) -> dy channel k, shifted back by the tap.
struct DataGradDecode {
  FastDivmod div_taps, div_ns;
  int PQ, Q, step_p, step_q;
  __device__ __forceinline__ Tap tap(int red) const {
    int k, j, jr, js;
    div_taps.divmod(red, k, j);
    div_ns.divmod(j, jr, js);
    const int dp = jr * step_p, dq = js * step_q;
    return Tap{k * PQ - dp * Q - dq, -dp, -dq};
  }
};

// B columns: (n, h', w') -> dy position (base_p + h', base_q + w') of image n.
struct DataPixelColumns {
  FastDivmod div_hcwc, div_wc;
  int KPQ, Q, base_p, base_q;
  __device__ __forceinline__ Tap column(int col) const {
    int n, hw, h, w;
    div_hcwc.divmod(col, n, hw);
    div_wc.divmod(hw, h, w);
    const int pp = base_p + h, qq = base_q + w;
    return Tap{n * KPQ + pp * Q + qq, pp, qq};
  }
};

// Filter gradient: dw_g (Kg, Crs) = dy_g (Kg, N*P*Q) * im2col(x_g)^T (N*P*Q, Crs).
struct FilterParams {
  ConvDims d;
  WindowDecode window;
  PixelDecode pixel;
  FastDivmod div_pq;
  int kred;    // N * P * Q
  int chunk;   // reduction length of one split, a multiple of BK
  int splits;
  bool vec_store;  // Crs % 4 == 0 and out 16-byte aligned
};

// A: dy_g viewed as (Kg, N*P*Q): element (k, npq) at k*PQ + n*K*PQ + pq.
struct FilterGradDelta {
  FastDivmod div_pq;
  int KPQ;
  __device__ __forceinline__ int delta(int npq) const {
    int n, pq;
    div_pq.divmod(npq, n, pq);
    return n * KPQ + pq;
  }
};

// Direct kernels (C/groups == 1).
struct DirectParams {
  ConvDims d;
  FastDivmod div_q, div_w, div_pq;
  bool has_bias;
};

// Writes the thread's accumulators (+ bias[ch0 + m]) to NCHW planes: row m is channel ch0 + m,
// column col is image n at position pos of its plane, from pixel.locate(col, n, pos). vec: the
// 4 columns of a group are 4 adjacent positions of one 16-byte aligned plane chunk.
template <class Cfg, class Locate>
__device__ __forceinline__ void store_planes(const float (&acc)[Cfg::TM][Cfg::TN], int ty, int tx, int m0, int M,
                                             int n0, int ncols, const float* bias, int channels, int ch0, int plane,
                                             bool vec, const Locate& locate, float* out) {
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i) {
    const int m = m0 + micro_index<Cfg::BM, Cfg::TM>(ty, i);
    if (m >= M) continue;
    const float bv = bias ? __ldg(bias + ch0 + m) : 0.0f;
#pragma unroll
    for (int j = 0; j < Cfg::TN; j += 4) {
      const int col = n0 + micro_index<Cfg::BN, Cfg::TN>(tx, j);
      if (vec) {
        if (col >= ncols) continue;
        int n, pos;
        locate(col, n, pos);
        const float4 v = make_float4(acc[i][j] + bv, acc[i][j + 1] + bv, acc[i][j + 2] + bv, acc[i][j + 3] + bv);
        *reinterpret_cast<float4*>(out + (n * channels + ch0 + m) * plane + pos) = v;
      } else {
#pragma unroll
        for (int jj = 0; jj < 4; ++jj) {
          if (col + jj >= ncols) continue;
          int n, pos;
          locate(col + jj, n, pos);
          out[(n * channels + ch0 + m) * plane + pos] = acc[i][j + jj] + bv;
        }
      }
    }
  }
}

}  // namespace cnn::conv2d_cuda_detail
