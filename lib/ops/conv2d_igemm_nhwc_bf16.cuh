// Device building blocks of the NHWC BF16 implicit GEMM (conv2d_igemm_nhwc_bf16_cuda.cu and
// ..._filter_cuda.cu): block tiles, the operand loaders, the multi-stage main loop and the
// epilogues, plus the launch helpers both files share. PTX wrappers (cp.async, ldmatrix, mma.sync)
// and the accumulator fragment layout are conv2d_igemm_bf16.cuh's.
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
#include <mutex>
#include <set>
#include <utility>

#include "core/bf16.h"
#include "core/cuda_check.h"
#include "ops/conv2d_igemm_bf16.cuh"
#include "ops/conv2d_igemm_nhwc_bf16_decode.h"

namespace cnn::igemm_nhwc_bf16_detail {

using igemm_bf16_detail::cp_async_16;
using igemm_bf16_detail::cp_async_commit;
using igemm_bf16_detail::cp_async_wait;
using igemm_bf16_detail::Fragments;
using igemm_bf16_detail::ldmatrix_x4;
using igemm_bf16_detail::ldmatrix_x4_trans;
using igemm_bf16_detail::mma_bf16_16816;

// BM x BN block tile of WARPS_M x WARPS_N warps, reduction step 32, STAGES-deep ring; MIN_BLOCKS
// resident blocks a multiprocessor asked of the register allocator.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, int MIN_BLOCKS_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, BK = 32, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int kMinBlocks = MIN_BLOCKS_;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // warp tile
  static constexpr int MI = WTM / 16, NI = WTN / 8;             // mma tiles per warp
  static constexpr int kLdK = BK + 8;                           // [rows][BK + 8]
  static constexpr int kLdAm = BM + 8, kLdBn = BN + 8;          // [BK][cols + 8]
  static constexpr int kLdC = BN + 8;                           // epilogue tile [BM][BN + 8] bf16
  template <bool kMN>
  static constexpr int a_elems() {
    return kMN ? BK * kLdAm : BM * kLdK;
  }
  template <bool kMN>
  static constexpr int b_elems() {
    return kMN ? BK * kLdBn : BN * kLdK;
  }
  static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tiles are whole 16 x 16 ldmatrix blocks");
  static_assert(kThreads % 4 == 0 && BM % (kThreads / 4) == 0 && BN % (kThreads / 4) == 0,
                "reduction-contiguous tiles: 4 chunks a row, rows split evenly over the threads");
  static_assert(kThreads % (BM / 8) == 0 && kThreads % (BN / 8) == 0 && BK % (kThreads / (BM / 8)) == 0 &&
                    BK % (kThreads / (BN / 8)) == 0,
                "pixel-major tiles: BM / 8 (BN / 8) chunks a row, rows split evenly over the threads");
  static_assert(STAGES >= 2, "a ring needs two stages");
  // Dynamic shared memory: the ring, or the bf16 output tile of the epilogue, whichever is larger.
  template <bool kAmn, bool kBmn>
  static constexpr int smem_bytes() {
    const int pipe = 2 * STAGES * (a_elems<kAmn>() + b_elems<kBmn>());
    const int out = 2 * BM * kLdC;
    return pipe > out ? pipe : out;
  }
};

// 8 bf16 (as bits) packed into the 16 bytes of one shared-memory chunk.
__device__ __forceinline__ void store_chunk(uint16_t* dst, const uint16_t (&v)[8]) {
  *reinterpret_cast<uint4*>(dst) = make_uint4(v[0] | (uint32_t(v[1]) << 16), v[2] | (uint32_t(v[3]) << 16),
                                              v[4] | (uint32_t(v[5]) << 16), v[6] | (uint32_t(v[7]) << 16));
}

// ---- loaders: A gathered rows (forward: x; backward data: dy), reduction contiguous ----
// Thread t copies chunk t % 4 (8 reduction elements) of rows t / 4 + i * (threads / 4); each row's
// window origin is decoded once, each step's tap once per thread.
template <class T, bool kVec, bool kData>
struct GatherRows {
  static constexpr int kRowStep = T::kThreads / 4, kRows = T::BM / kRowStep;
  const NhwcGather& g;
  const uint16_t* src;
  int red_begin, red_end, k8;
  NhwcPos rows[kRows];

  __device__ __forceinline__ GatherRows(const NhwcGather& g_, const uint16_t* src_, int M, int m0, int red_begin_,
                                        int red_end_)
      : g(g_), src(src_), red_begin(red_begin_), red_end(red_end_), k8(int(threadIdx.x) % 4) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int m = m0 + line(i);
      rows[i] = m < M ? g.template row_as<kData>(m) : nhwc_invalid_row();
    }
  }
  __device__ __forceinline__ static int line(int i) { return int(threadIdx.x) / 4 + i * kRowStep; }
  __device__ __forceinline__ void load(int step, uint16_t* s) const {
    const int red = red_begin + step * T::BK + k8 * 8;
    if constexpr (kVec) {  // Cs % 8 == 0: the chunk is one tap's 8 channels
      const bool in = red < red_end;
      const NhwcPos tap = g.template tap_as<kData>(in ? red : 0);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const bool ok = in && g.template valid_as<kData>(rows[i], tap);
        cp_async_16(s + line(i) * T::kLdK + k8 * 8, ok ? src + (rows[i].off + tap.off) : src, ok);
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
        store_chunk(s + line(i) * T::kLdK + k8 * 8, v);
      }
    }
  }
};

// ---- loaders: B rows of a row-major (N, red) matrix (the packed weights), reduction contiguous ----
template <class T, bool kVec>
struct PlainRows {
  static constexpr int kRowStep = T::kThreads / 4, kRows = T::BN / kRowStep;
  const uint16_t* src;
  int ld, N, n0, red_begin, red_end, k8;

  __device__ __forceinline__ PlainRows(const uint16_t* src_, int ld_, int N_, int n0_, int red_begin_, int red_end_)
      : src(src_), ld(ld_), N(N_), n0(n0_), red_begin(red_begin_), red_end(red_end_), k8(int(threadIdx.x) % 4) {}
  __device__ __forceinline__ static int line(int i) { return int(threadIdx.x) / 4 + i * kRowStep; }
  __device__ __forceinline__ void load(int step, uint16_t* s) const {
    const int red = red_begin + step * T::BK + k8 * 8;
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int n = n0 + line(i);
      if constexpr (kVec) {  // ld % 8 == 0
        const bool ok = n < N && red < red_end;
        cp_async_16(s + line(i) * T::kLdK + k8 * 8, ok ? src + (n * ld + red) : src, ok);
      } else {
        uint16_t v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = n < N && red + e < red_end ? __ldg(src + (n * ld + red + e)) : uint16_t(0);
        store_chunk(s + line(i) * T::kLdK + k8 * 8, v);
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
// mma. kAmn / kBmn: the operand's tile is [BK][cols + 8] (ldmatrix.trans), else [rows][BK + 8].
template <class T, bool kAmn, bool kBmn>
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
      b[2 * nj][0] = r[0];
      b[2 * nj][1] = r[1];
      b[2 * nj + 1][0] = r[2];
      b[2 * nj + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < T::MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < T::NI; ++ni) mma_bf16_16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
  }
}

// acc = A (BM x red) * B (red x BN) over `steps` reduction steps through a STAGES-deep ring in
// `smem`. Ends with a barrier, so the caller may reuse the shared memory.
template <class T, bool kAmn, bool kBmn, class L>
__device__ __forceinline__ void mainloop(const L& ld, int steps, float (&acc)[T::MI][T::NI][4], uint16_t* smem) {
  constexpr int kA = T::template a_elems<kAmn>(), kStage = kA + T::template b_elems<kBmn>();
  const Fragments<T> f;
#pragma unroll
  for (int mi = 0; mi < T::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < T::NI; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;
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
    mma_step<T, kAmn, kBmn>(smem + read * kStage, smem + read * kStage + kA, acc, f.wm, f.wn, f.lane);
    read = read + 1 == T::STAGES ? 0 : read + 1;
    write = write + 1 == T::STAGES ? 0 : write + 1;
  }
  cp_async_wait<0>();
  __syncthreads();
}

// ---- epilogues ----
// out (M, N) bf16 row-major = relu?(acc + bias[n]), rounded once. The tile goes through shared
// memory ([BM][BN + 8]) so each thread writes 8 contiguous columns; vec: N % 8 == 0 and a 16-byte
// aligned out, so those 8 are one 16-byte store.
template <class T>
__device__ __forceinline__ void store_rows_bf16(const float (&acc)[T::MI][T::NI][4], const float* bias, bool relu,
                                                uint16_t* out, int M, int N, int m0, int n0, bool vec, uint16_t* sC) {
  const Fragments<T> f;
#pragma unroll
  for (int ni = 0; ni < T::NI; ++ni) {
    const int nl = f.col(ni);
    const float b0 = bias && n0 + nl < N ? __ldg(bias + n0 + nl) : 0.0f;
    const float b1 = bias && n0 + nl + 1 < N ? __ldg(bias + n0 + nl + 1) : 0.0f;
#pragma unroll
    for (int mi = 0; mi < T::MI; ++mi)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float v0 = acc[mi][ni][2 * half] + b0, v1 = acc[mi][ni][2 * half + 1] + b1;
        if (relu) v0 = fmaxf(v0, 0.0f), v1 = fmaxf(v1, 0.0f);
        *reinterpret_cast<uint32_t*>(sC + f.row(mi, half) * T::kLdC + nl) = pack_bf16x2(v0, v1);
      }
  }
  __syncthreads();
  constexpr int kChunksPerRow = T::BN / 8;
  for (int id = int(threadIdx.x); id < T::BM * kChunksPerRow; id += T::kThreads) {
    const int ml = id / kChunksPerRow, c8 = id % kChunksPerRow;
    const int m = m0 + ml, n = n0 + c8 * 8;
    if (m >= M || n >= N) continue;
    const uint16_t* s = sC + ml * T::kLdC + c8 * 8;
    uint16_t* o = out + (int64_t(m) * N + n);
    if (vec && n + 8 <= N) {
      *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(s);
    } else {
      for (int j = 0; j < 8 && n + j < N; ++j) o[j] = s[j];
    }
  }
}

// ---- launch helpers ----
// Launches `kernel` with `smem` bytes of dynamic shared memory, raising the kernel's limit first
// where it is above the default 48 KB (once per kernel and device).
template <class Kernel, class... Args>
inline void launch(const char* what, Kernel* kernel, dim3 grid, int threads, int smem, cudaStream_t stream,
                   Args... args) {
  if (smem > 48 * 1024) {
    static std::mutex mutex;
    static std::set<std::pair<const void*, int>> raised;
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const std::lock_guard<std::mutex> lock(mutex);
    const std::pair<const void*, int> key{reinterpret_cast<const void*>(kernel), device};
    if (!raised.count(key)) {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      raised.insert(key);
    }
  }
  kernel<<<grid, threads, smem, stream>>>(args...);
  CUDA_CHECK_LAUNCH(what);
}

inline int multiprocessors() {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
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

// fn(TileN{}) for tile index `tile`; kVec false instantiates the scalar tile only.
template <bool kVec, class Fn>
inline void with_tile(int tile, Fn&& fn) {
  if constexpr (!kVec) {
    fn(Tile7{});
  } else {
    switch (tile) {
      case 0:
        return fn(Tile0{});
      case 1:
        return fn(Tile1{});
      case 2:
        return fn(Tile2{});
      case 3:
        return fn(Tile3{});
      case 4:
        return fn(Tile4{});
      case 5:
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
