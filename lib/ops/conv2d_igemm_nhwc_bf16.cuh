// Device building blocks of the NHWC BF16/F16 implicit GEMM (conv2d_igemm_nhwc_bf16_cuda.cu and
// ..._filter_cuda.cu): block tiles, the operand loaders, the multi-stage main loop and the
// epilogues, plus the call preparation both files share (prepare_call). PTX wrappers (cp.async,
// ldmatrix, mma.sync), the accumulator fragment layout and the launch helpers (launch,
// multiprocessors) are conv2d_igemm_bf16.cuh's. The element type E (bf16 or f16, half16.cuh) is a
// template parameter only where it matters: the mma instruction, the epilogue's rounding and the
// filter gradient's ones column; the loaders move 16-bit words of either type alike.
// Main loop: every operand comes by cp.async into a STAGES-deep ring (one commit group per step,
// one barrier per step); the scalar loaders (kVec false: channel counts not multiples of 8 or
// unaligned buffers) fill the same ring through registers, synchronously.
// Shared tiles: reduction-contiguous operands [rows][32 + 8] (plain ldmatrix), the filter
// gradient's pixel-major operands [32][cols + 8] (ldmatrix.trans); the 8-element pad puts the 8
// rows of every ldmatrix phase in distinct banks and keeps rows 16-byte aligned.
// Trap: loaders hold references to the kernel's __grid_constant__ parameters (constant bank).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d_igemm_bf16.cuh"
#include "ops/conv2d_igemm_nhwc_bf16.h"
#include "ops/conv2d_igemm_nhwc_bf16_layout.h"
#include "ops/conv2d_igemm_nhwc_bf16_decode.h"
#include "ops/conv2d_igemm_nhwc_bf16_params.h"
#include "ops/conv2d_igemm_nhwc_bf16_wgmma.h"
#include "ops/half16.cuh"
#include "ops/reduce.cuh"

namespace cnn::igemm_nhwc_bf16_detail {

using igemm_bf16_detail::cp_async_16;
using igemm_bf16_detail::cp_async_commit;
using igemm_bf16_detail::cp_async_wait;
using igemm_bf16_detail::Fragments;
using igemm_bf16_detail::ldmatrix_x4;
using igemm_bf16_detail::ldmatrix_x4_trans;
using igemm_bf16_detail::launch;
using igemm_bf16_detail::mma_tile;
using igemm_bf16_detail::multiprocessors;
using igemm_bf16_detail::split_b_x4;
using igemm_bf16_detail::zero_acc;

// BM x BN block tile of WARPS_M x WARPS_N warps (mma.sync), reduction step 32, STAGES-deep ring;
// MIN_BLOCKS resident blocks a multiprocessor asked of the register allocator. Shared tiles padded.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, int MIN_BLOCKS_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, BK = 32, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int kMinBlocks = MIN_BLOCKS_;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // warp tile
  static constexpr int MI = WTM / 16, NI = WTN / 8;             // mma tiles per warp
  static constexpr int kLdK = BK + 8;                           // [rows][BK + 8]
  static constexpr int kLdAm = BM + 8, kLdBn = BN + 8;          // [BK][cols + 8]
  static constexpr int kLdC = BN + 8;                           // epilogue tile [BM][BN + 8] 16-bit
  template <bool kMN>
  static constexpr int a_elems() {
    return kMN ? BK * kLdAm : BM * kLdK;
  }
  template <bool kMN>
  static constexpr int b_elems() {
    return kMN ? BK * kLdBn : BN * kLdK;
  }
  // Element offsets of 16-byte chunk c8 of a tile row: reduction-contiguous (row = M or N index,
  // c8 along the reduction) and pixel-major (row = reduction index, c8 along M or N).
  __device__ __forceinline__ static int k_off(int row, int c8) { return row * kLdK + c8 * 8; }
  __device__ __forceinline__ static int am_off(int row, int c8) { return row * kLdAm + c8 * 8; }
  __device__ __forceinline__ static int bn_off(int row, int c8) { return row * kLdBn + c8 * 8; }
  static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tiles are whole 16 x 16 ldmatrix blocks");
  static_assert(STAGES >= 2, "a ring needs two stages");
  // Dynamic shared memory: the ring, or the 16-bit output tile of the epilogue, whichever is larger.
  template <bool kAmn, bool kBmn>
  static constexpr int smem_bytes() {
    const int pipe = 2 * STAGES * (a_elems<kAmn>() + b_elems<kBmn>());
    const int out = 2 * BM * kLdC;
    return pipe > out ? pipe : out;
  }
};

// 8 16-bit elements (as bits) packed into the 16 bytes of one shared-memory chunk.
__device__ __forceinline__ void store_chunk(uint16_t* dst, const uint16_t (&v)[8]) {
  *reinterpret_cast<uint4*>(dst) = make_uint4(v[0] | (uint32_t(v[1]) << 16), v[2] | (uint32_t(v[3]) << 16),
                                              v[4] | (uint32_t(v[5]) << 16), v[6] | (uint32_t(v[7]) << 16));
}

// The filter gradient's bias column chunk: 1.0 then seven zeros (the columns past the last); row 0
// bf16, row 1 f16 (ones_chunk<E>).
static __device__ __align__(16) const uint16_t kOnesChunks[2][8] = {{Half16<bf16>::kOne, 0, 0, 0, 0, 0, 0, 0},
                                                                    {Half16<f16>::kOne, 0, 0, 0, 0, 0, 0, 0}};
template <class E>
__device__ __forceinline__ const uint16_t* ones_chunk() {
  return kOnesChunks[std::is_same_v<E, f16> ? 1 : 0];
}

// Loaders copy reduction step `step` (T::BK elements) of one operand into a stage. T gives the
// tile sizes and where chunk c8 of a row goes (k_off, am_off, bn_off: padded or swizzled).

// ---- A gathered rows (forward: x; backward data: dy), reduction contiguous ----
// Thread t copies chunk t % (BK / 8) of rows t / (BK / 8) + i * (threads / (BK / 8)); each row's
// window origin is decoded once, each step's tap once per thread.
template <class T, bool kVec, bool kData>
struct GatherRows {
  static constexpr int kPerRow = T::BK / 8, kRowStep = T::kThreads / kPerRow, kRows = T::BM / kRowStep;
  static_assert(T::kThreads % kPerRow == 0 && T::BM % kRowStep == 0, "rows split evenly over the threads");
  const NhwcGather& g;
  const uint16_t* src;
  int red_begin, red_end, k8;
  NhwcPos rows[kRows];

  __device__ __forceinline__ GatherRows(const NhwcGather& g_, const uint16_t* src_, int M, int m0, int red_begin_,
                                        int red_end_)
      : g(g_), src(src_), red_begin(red_begin_), red_end(red_end_), k8(int(threadIdx.x) % kPerRow) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int m = m0 + line(i);
      rows[i] = m < M ? g.template row_as<kData>(m) : nhwc_invalid_row();
    }
  }
  __device__ __forceinline__ static int line(int i) { return int(threadIdx.x) / kPerRow + i * kRowStep; }
  __device__ __forceinline__ void load(int step, uint16_t* s) const {
    const int red = red_begin + step * T::BK + k8 * 8;
    if constexpr (kVec) {  // Cs % 8 == 0: the chunk is one tap's 8 channels
      const bool in = red < red_end;
      const NhwcPos tap = g.template tap_as<kData>(in ? red : 0);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const bool ok = in && g.template valid_as<kData>(rows[i], tap);
        cp_async_16(s + T::k_off(line(i), k8), ok ? src + (rows[i].off + tap.off) : src, ok);
      }
    } else {
      NhwcPos taps[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) taps[e] = g.template tap_as<kData>(red + e < red_end ? red + e : 0);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        uint16_t v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const bool ok = red + e < red_end && g.template valid_as<kData>(rows[i], taps[e]);
          v[e] = ok ? __ldg(src + (rows[i].off + taps[e].off)) : uint16_t(0);
        }
        store_chunk(s + T::k_off(line(i), k8), v);
      }
    }
  }
};

// ---- B rows of a row-major (N, red) matrix (the packed weights), reduction contiguous ----
template <class T, bool kVec>
struct PlainRows {
  static constexpr int kPerRow = T::BK / 8, kRowStep = T::kThreads / kPerRow, kRows = T::BN / kRowStep;
  static_assert(T::kThreads % kPerRow == 0 && T::BN % kRowStep == 0, "rows split evenly over the threads");
  const uint16_t* src;
  int ld, N, n0, red_begin, red_end, k8;

  __device__ __forceinline__ PlainRows(const uint16_t* src_, int ld_, int N_, int n0_, int red_begin_, int red_end_)
      : src(src_), ld(ld_), N(N_), n0(n0_), red_begin(red_begin_), red_end(red_end_), k8(int(threadIdx.x) % kPerRow) {}
  __device__ __forceinline__ static int line(int i) { return int(threadIdx.x) / kPerRow + i * kRowStep; }
  __device__ __forceinline__ void load(int step, uint16_t* s) const {
    const int red = red_begin + step * T::BK + k8 * 8;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int n = n0 + line(i);
      if constexpr (kVec) {  // ld % 8 == 0
        const bool ok = n < N && red < red_end;
        cp_async_16(s + T::k_off(line(i), k8), ok ? src + (n * ld + red) : src, ok);
      } else {
        uint16_t v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = n < N && red + e < red_end ? __ldg(src + (n * ld + red + e)) : uint16_t(0);
        store_chunk(s + T::k_off(line(i), k8), v);
      }
    }
  }
};

// ---- filter gradient A: dy (npq, k), pixel-major ----
// Thread t copies chunk t % (BM / 8) (8 channels) of pixel rows t / (BM / 8) + i * (threads / (BM / 8)).
template <class T, bool kVec>
struct DyRows {
  static constexpr int kChunks = T::BM / 8, kRowStep = T::kThreads / kChunks, kRows = T::BK / kRowStep;
  static_assert(T::kThreads % kChunks == 0 && T::BK % kRowStep == 0, "rows split evenly over the threads");
  const uint16_t* dy;
  int K, k0, red_begin, red_end, r0, c8;
  __device__ __forceinline__ DyRows(const uint16_t* dy_, int K_, int m0, int red_begin_, int red_end_)
      : dy(dy_),
        K(K_),
        k0(m0 + int(threadIdx.x) % kChunks * 8),
        red_begin(red_begin_),
        red_end(red_end_),
        r0(int(threadIdx.x) / kChunks),
        c8(int(threadIdx.x) % kChunks) {}
  __device__ __forceinline__ void load(int step, uint16_t* s) const {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = r0 + i * kRowStep, npq = red_begin + step * T::BK + row;
      uint16_t* dst = s + T::am_off(row, c8);
      if constexpr (kVec) {  // K % 8 == 0: the chunk is in or out whole
        const bool ok = k0 < K && npq < red_end;
        cp_async_16(dst, ok ? dy + (npq * K + k0) : dy, ok);
      } else {
        uint16_t v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = k0 + e < K && npq < red_end ? __ldg(dy + (npq * K + k0 + e)) : uint16_t(0);
        store_chunk(dst, v);
      }
    }
  }
};

// ---- filter gradient B: x gathered, pixel-major (E: the element type of the ones column) ----
// A row (pixel) of the tile is shared by kLanes threads, each copying kCols of its 16-byte chunks
// (chunks lane + j * kLanes, their taps decoded once): the row's window is decoded once per thread
// and step, not once per chunk. Thread t: lane t % kLanes, rows t / kLanes + i * (threads / kLanes).
template <class E, class T, bool kVec>
struct XRows {
  static constexpr int kChunks = T::BN / 8, kPerThread = kChunks * T::BK / T::kThreads;
  static constexpr int kCols = kPerThread < 8 ? kPerThread : 8;
  static constexpr int kLanes = kChunks / kCols, kRowStep = T::kThreads / kLanes, kRows = T::BK / kRowStep;
  static_assert(kCols >= 1 && kChunks % kCols == 0 && T::kThreads % kLanes == 0 && T::BK % kRowStep == 0,
                "rows and chunks split evenly over the threads");
  const NhwcGather& g;
  const uint16_t* x;
  int red_begin, red_end, r0, lane, n0, rsc;
  bool db;
  NhwcPos taps[kVec ? kCols : 1];
  uint32_t gather_mask = 0, ones_mask = 0;  // kVec: bit j for chunk j of this thread

  __device__ __forceinline__ XRows(const FilterGemmParams& p, const uint16_t* x_, int n0_, int red_begin_, int red_end_)
      : g(p.g),
        x(x_),
        red_begin(red_begin_),
        red_end(red_end_),
        r0(int(threadIdx.x) / kLanes),
        lane(int(threadIdx.x) % kLanes),
        n0(n0_),
        rsc(p.rsc),
        db(p.db) {
    if constexpr (kVec) {
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int col = n0 + chunk(j) * 8;
        taps[j] = g.template tap_as<false>(col < rsc ? col : 0);
        if (col < rsc) gather_mask |= 1u << j;
        if (db && col == rsc) ones_mask |= 1u << j;
      }
    }
  }
  __device__ __forceinline__ int chunk(int j) const { return lane + j * kLanes; }
  __device__ __forceinline__ void load(int step, uint16_t* s) const {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = r0 + i * kRowStep, npq = red_begin + step * T::BK + row;
      const bool in = npq < red_end;
      const NhwcPos pos = g.template row_as<false>(in ? npq : 0);
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        uint16_t* dst = s + T::bn_off(row, chunk(j));
        if constexpr (kVec) {  // C % 8 == 0: the chunk is one tap's 8 channels, or the ones chunk
          const bool ones = (ones_mask >> j) & 1u;
          const bool ok = in && (ones || (((gather_mask >> j) & 1u) && g.template valid_as<false>(pos, taps[j])));
          const uint16_t* src = ones ? ones_chunk<E>() : x + (pos.off + taps[j].off);
          cp_async_16(dst, ok ? src : x, ok);
        } else {
          uint16_t v[8];
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            const int col = n0 + chunk(j) * 8 + e;
            const NhwcPos tap = g.template tap_as<false>(col < rsc ? col : 0);
            const bool gather = in && col < rsc && g.template valid_as<false>(pos, tap);
            v[e] = gather                      ? __ldg(x + (pos.off + tap.off))
                   : in && db && col == rsc ? Half16<E>::kOne
                                            : uint16_t(0);
          }
          store_chunk(dst, v);
        }
      }
    }
  }
};

// A and B loaders as one.
template <class A, class B>
struct PairLoader {
  A a;
  B b;
  __device__ __forceinline__ void load(int step, uint16_t* sA, uint16_t* sB) const {
    a.load(step, sA);
    b.load(step, sB);
  }
};

// ---- main loop ----
// One step of 32 reduction elements: per 16, ldmatrix the warp's A and B fragments, then MI x NI
// mma (of E inputs). kAmn / kBmn: the operand's tile is [BK][cols + 8] (ldmatrix.trans), else
// [rows][BK + 8].
template <class E, class T, bool kAmn, bool kBmn>
__device__ __forceinline__ void mma_step(const uint16_t* sA, const uint16_t* sB, float (&acc)[T::MI][T::NI][4], int wm,
                                         int wn, int lane) {
#pragma unroll
  for (int kk = 0; kk < T::BK; kk += 16) {
    uint32_t a[T::MI][4], b[T::NI][2];
#pragma unroll
    for (int mi = 0; mi < T::MI; ++mi) {
      if constexpr (kAmn)
        ldmatrix_x4_trans(
            a[mi], sA + (kk + (lane & 7) + (lane >> 4) * 8) * T::kLdAm + wm * T::WTM + mi * 16 + ((lane >> 3) & 1) * 8);
      else
        ldmatrix_x4(a[mi], sA + (wm * T::WTM + mi * 16 + (lane & 15)) * T::kLdK + kk + (lane >> 4) * 8);
    }
#pragma unroll
    for (int nj = 0; nj < T::NI / 2; ++nj) {
      uint32_t r[4];
      if constexpr (kBmn)
        ldmatrix_x4_trans(
            r, sB + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * T::kLdBn + wn * T::WTN + nj * 16 + (lane >> 4) * 8);
      else
        ldmatrix_x4(r,
                    sB + (wn * T::WTN + nj * 16 + (lane & 7) + (lane >> 4) * 8) * T::kLdK + kk + ((lane >> 3) & 1) * 8);
      split_b_x4(b, nj, r);
    }
    mma_tile<E>(acc, a, b);
  }
}

// acc = A (BM x red) * B (red x BN) over `steps` reduction steps through a STAGES-deep ring in
// `smem` (E: the operands' element type). Ends with a barrier, so the caller may reuse the shared
// memory.
template <class E, class T, bool kAmn, bool kBmn, class L>
__device__ __forceinline__ void mainloop(const L& ld, int steps, float (&acc)[T::MI][T::NI][4], uint16_t* smem) {
  constexpr int kA = T::template a_elems<kAmn>(), kStage = kA + T::template b_elems<kBmn>();
  const Fragments<T> f;
  zero_acc(acc);
#pragma unroll
  for (int s = 0; s < T::STAGES - 1; ++s) {
    if (s < steps) ld.load(s, smem + s * kStage, smem + s * kStage + kA);
    cp_async_commit();
  }
  int read = 0, write = T::STAGES - 1;
  for (int kt = 0; kt < steps; ++kt) {
    cp_async_wait<T::STAGES - 2>();
    __syncthreads();  // step kt is in shared memory; the buffer of step kt - 1 is free
    if (kt + T::STAGES - 1 < steps) ld.load(kt + T::STAGES - 1, smem + write * kStage, smem + write * kStage + kA);
    cp_async_commit();
    mma_step<E, T, kAmn, kBmn>(smem + read * kStage, smem + read * kStage + kA, acc, f.wm, f.wn, f.lane);
    read = read + 1 == T::STAGES ? 0 : read + 1;
    write = write + 1 == T::STAGES ? 0 : write + 1;
  }
  cp_async_wait<0>();
  __syncthreads();
}

// ---- epilogues ----
// Every accumulator pair (row, col), (row, col + 1) of an mma.sync block tile: fn(row, col, v0, v1)
// in block-tile coordinates (the C fragment layout of mma.m16n8k16).
template <class T, class Fn>
__device__ __forceinline__ void for_each_pair(const float (&acc)[T::MI][T::NI][4], Fn&& fn) {
  const Fragments<T> f;
#pragma unroll
  for (int mi = 0; mi < T::MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int ni = 0; ni < T::NI; ++ni)
        fn(f.row(mi, half), f.col(ni), acc[mi][ni][2 * half], acc[mi][ni][2 * half + 1]);
}

// out (M, N) E (bf16 or f16) row-major = relu?(acc + bias[n]), rounded once, for a BM x BN block
// tile whose pairs `each` visits. The tile goes through shared memory ([BM][BN + 8]) so each thread
// writes 8 contiguous columns; vec: N % 8 == 0 and a 16-byte aligned out, so those 8 are one
// 16-byte store.
template <class E, int BM, int BN, int kThreads, class Each>
__device__ __forceinline__ void store_rows_half16(Each&& each, const float* bias, bool relu, uint16_t* out, int M,
                                                  int N, int m0, int n0, bool vec, uint16_t* sC) {
  constexpr int kLdC = BN + 8;
  each([&](int ml, int nl, float v0, float v1) {
    if (bias) {
      v0 += n0 + nl < N ? __ldg(bias + n0 + nl) : 0.0f;
      v1 += n0 + nl + 1 < N ? __ldg(bias + n0 + nl + 1) : 0.0f;
    }
    if (relu) v0 = fmaxf(v0, 0.0f), v1 = fmaxf(v1, 0.0f);
    *reinterpret_cast<uint32_t*>(sC + ml * kLdC + nl) = Half16<E>::pack2(v0, v1);
  });
  __syncthreads();
  constexpr int kChunksPerRow = BN / 8;
  for (int id = int(threadIdx.x); id < BM * kChunksPerRow; id += kThreads) {
    const int ml = id / kChunksPerRow, c8 = id % kChunksPerRow;
    const int m = m0 + ml, n = n0 + c8 * 8;
    if (m >= M || n >= N) continue;
    const uint16_t* s = sC + ml * kLdC + c8 * 8;
    uint16_t* o = out + (int64_t(m) * N + n);
    if (vec && n + 8 <= N) {
      *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(s);
    } else {
      for (int j = 0; j < 8 && n + j < N; ++j) o[j] = s[j];
    }
  }
}

// out (M, N) FP32 row-major = acc: a split's partial sums (pairs as one float2 where N is even).
template <class Each>
__device__ __forceinline__ void store_rows_fp32(Each&& each, float* out, int M, int N, int m0, int n0) {
  each([&](int ml, int nl, float v0, float v1) {
    const int m = m0 + ml, n = n0 + nl;
    if (m >= M) return;
    float* p = out + (int64_t(m) * N + n);
    if (N % 2 == 0 && n + 1 < N) {
      *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
    } else {
      if (n < N) p[0] = v0;
      if (n + 1 < N) p[1] = v1;
    }
  });
}

// The filter gradient's tile: column (r, s, c) of row k to dw[k, c, r, s], the ones column to db[k].
template <class Each>
__device__ __forceinline__ void store_filter(Each&& each, const FilterGemmParams& p, float* dw, float* db, int m0,
                                             int n0) {
  each([&](int ml, int nl, float v0, float v1) {
    const int k = m0 + ml;
    if (k >= p.M) return;
    const float v[2] = {v0, v1};
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int col = n0 + nl + e;
      if (col < p.rsc) {
        int rs, c;
        p.div_c.divmod(col, rs, c);
        dw[k * p.CRS + c * p.RS + rs] = v[e];
      } else if (col == p.rsc && p.db) {
        db[k] = v[e];
      }
    }
  });
}

// ---- call preparation (host) ----
// What one entry-point call runs with: the checks, the plan (chosen where not given), its
// effective splits, the workspace carved for them (db: the filter gradient's bias too).
struct NhwcCall {
  cudaStream_t stream;
  IgemmNhwcBf16Plan plan;
  int splits;
  IgemmNhwcBf16WorkspaceLayout layout;
  unsigned char* ws;
};
inline NhwcCall prepare_call(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const IgemmNhwcBf16Plan* plan,
                             bool db, const char* what) {
  NhwcCall c{};
  c.stream = cuda::stream_of(ctx, what);
  if (!conv2d_igemm_nhwc_bf16_can_implement(sh))
    CNN_THROW("{}: cannot implement {} (needs groups == 1 and every tensor under 2^31 elements)", what, sh.to_string());
  c.plan = plan ? *plan : conv2d_igemm_nhwc_bf16_device_plan(sh, dir, ctx.workspace_limit_bytes);
  conv2d_igemm_nhwc_bf16_tile_info(c.plan.tile);  // throws for a bad index
  CNN_CHECK(c.plan.splits >= 1, "{}: plan splits must be >= 1, got {}", what, c.plan.splits);
  c.splits = conv2d_igemm_nhwc_bf16_effective_splits(sh, dir, c.plan);
  c.layout = igemm_nhwc_bf16_workspace_layout(sh, dir, c.splits, db);
  c.ws = c.layout.total ? static_cast<unsigned char*>(cuda::workspace_bytes(ctx, c.layout.total, what)) : nullptr;
  return c;
}

// The tiles of conv2d_igemm_nhwc_bf16.h, by index.
using Tile0 = Tile<256, 128, 4, 2, 4, 1>;
using Tile1 = Tile<128, 256, 2, 4, 4, 1>;
using Tile2 = Tile<128, 128, 2, 2, 4, 2>;
using Tile3 = Tile<256, 64, 4, 1, 4, 2>;
using Tile4 = Tile<64, 256, 1, 4, 4, 2>;
using Tile5 = Tile<128, 64, 2, 2, 4, 3>;
using Tile6 = Tile<64, 128, 2, 2, 4, 3>;
using Tile7 = Tile<64, 64, 2, 2, 4, 4>;

// fn(TileN{}) for tile index `tile` (a wgmma tile: the mma.sync tile of its size); kVec false
// instantiates the scalar tile only.
template <bool kVec, class Fn>
inline void with_tile(int tile, Fn&& fn) {
  if constexpr (!kVec) {
    fn(Tile7{});
  } else {
    switch (tile) {
      case 0:
        return fn(Tile0{});
      case 1:
      case 8:
        return fn(Tile1{});
      case 2:
      case 9:
        return fn(Tile2{});
      case 3:
        return fn(Tile3{});
      case 4:
      case 11:
        return fn(Tile4{});
      case 5:
      case 10:
        return fn(Tile5{});
      case 6:
        return fn(Tile6{});
      default:
        return fn(Tile7{});
    }
  }
}

// Grid of one GEMM: x = the (m tile, n tile) pairs with n fastest (blocks that share A rows run
// together), z = the reduction slices.
template <class T>
inline dim3 gemm_grid(int64_t M, int64_t N, int splits) {
  const int64_t tiles = ((M + T::BM - 1) / T::BM) * ((N + T::BN - 1) / T::BN);
  return dim3(unsigned(tiles), 1, unsigned(splits));
}
template <class T>
__device__ __forceinline__ void block_origin(int N, int& m0, int& n0) {
  const int n_tiles = (N + T::BN - 1) / T::BN;
  m0 = int(blockIdx.x) / n_tiles * T::BM;
  n0 = int(blockIdx.x) % n_tiles * T::BN;
}

}  // namespace cnn::igemm_nhwc_bf16_detail
