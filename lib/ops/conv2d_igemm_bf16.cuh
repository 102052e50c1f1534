// Device building blocks of conv2d_igemm_bf16_cuda.cu: PTX wrappers (cp.async, ldmatrix; the
// mma.sync m16n8k16 of either 16-bit type is half16.cuh's), the block tiles, the main loop, the
// epilogues, and the launch helpers (also used by the NHWC kernels, conv2d_igemm_nhwc_bf16.cuh).
// Main loop: A (M x 32 per step, reduction contiguous) comes either by cp.async 16-byte copies into
// a STAGES-deep ring, or through registers; the gathered B operand always comes through registers
// (NCHW gathers are 2-byte elements, which cp.async cannot copy), loaded one step ahead of its
// store so the loads' latency hides behind a step of mma. One barrier per step.
// Shared tiles: A [BM][32 + 8], B either [32][BN + 8] (reduction rows, read with ldmatrix.trans)
// or [BN][32 + 8] (reduction contiguous, plain ldmatrix); the 8-element pad puts the 8 rows of
// every ldmatrix phase in distinct banks and keeps rows 16-byte aligned.
// Trap: decoders and parameters are read through references to __grid_constant__ kernel
// parameters (constant bank), not copied into registers.
// Trap: fragment layouts are the PTX ISA's for mma.m16n8k16 .bf16 (row-major A, column-major B):
// lane = 4 * group + t; A regs {a0..a3} hold rows g, g+8 and columns 2t.., 2t+8..; B regs {b0, b1}
// hold reduction rows 2t.. and 2t+8.. of column g; C regs {c0, c1} row g, {c2, c3} row g+8,
// columns 2t, 2t+1.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <utility>

#include "core/bf16.h"
#include "core/cuda_check.h"
#include "ops/conv2d_igemm_bf16_decode.h"
#include "ops/half16.cuh"

namespace cnn::igemm_bf16_detail {

// ---- PTX ----
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, bypassing L1; valid == false writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}
// A warp tile's accumulators (MI x NI fragments of m16n8), all zero.
template <int MI, int NI>
__device__ __forceinline__ void zero_acc(float (&acc)[MI][NI][4]) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;
}

// One ldmatrix.x4 r of B holds the fragments of two n8 columns: b[2 nj] and b[2 nj + 1].
template <int NI>
__device__ __forceinline__ void split_b_x4(uint32_t (&b)[NI][2], int nj, const uint32_t (&r)[4]) {
  b[2 * nj][0] = r[0];
  b[2 * nj][1] = r[1];
  b[2 * nj + 1][0] = r[2];
  b[2 * nj + 1][1] = r[3];
}

// acc[mi][ni] += a[mi] * b[ni] for every fragment pair of a warp tile, inputs of type E (bf16 or
// f16: Half16<E>::mma16816).
template <class E = bf16, int MI, int NI>
__device__ __forceinline__ void mma_tile(float (&acc)[MI][NI][4], const uint32_t (&a)[MI][4],
                                         const uint32_t (&b)[NI][2]) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni) Half16<E>::mma16816(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
}
// One bf16 (as its bits) through the read-only path; 0 (+0.0) where !ok, without touching p.
__device__ __forceinline__ uint32_t load_bf16_or_zero(const uint16_t* p, bool ok) { return ok ? __ldg(p) : 0u; }

// ---- tiles ----
// BM x BN block tile of WARPS_M x WARPS_N warps, reduction step 32, STAGES-deep cp.async ring for A.
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_>
struct Tile {
  static constexpr int BM = BM_, BN = BN_, BK = 32, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, STAGES = STAGES_;
  static constexpr int kThreads = 32 * WARPS_M * WARPS_N;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // warp tile
  static constexpr int MI = WTM / 16, NI = WTN / 8;              // mma tiles per warp
  static constexpr int kLdA = BK + 8, kLdBkn = BN + 8, kLdBnk = BK + 8, kLdC = BN + 8;
  static constexpr int kAStage = BM * kLdA, kBStageKN = BK * kLdBkn, kBStageNK = BN * kLdBnk;  // elements
  static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tiles are whole 16 x 16 ldmatrix blocks");
  static_assert((BM * BK / 8) % kThreads == 0 && (BN * BK / 8) % kThreads == 0, "16-byte chunks split evenly");
  static_assert(kThreads % (BN / 8) == 0, "each thread keeps its 8 columns of a [BK][BN] tile");
  static_assert(STAGES >= 2, "a ring needs two stages");
  // Dynamic shared memory: the pipeline, or the bf16 output tile of the epilogue, whichever is larger.
  static constexpr int smem_bytes(bool a_async, bool b_kn) {
    const int pipe = 2 * ((a_async ? STAGES : 2) * kAStage + 2 * (b_kn ? kBStageKN : kBStageNK));
    const int out = 2 * BM * kLdC;
    return pipe > out ? pipe : out;
  }
};

// ---- loaders: A rows with the reduction contiguous ----
// Element (m, red) of A at src[m * ld + red] for m < M and red_begin <= red < red_end. Thread t
// moves chunks of 8 reduction elements: chunk t % 4 of rows t / 4 + i * (threads / 4).
template <class T, bool kAsync>
struct RowsA {
  static constexpr bool kAsyncA = kAsync;
  static constexpr int kRowStep = T::kThreads / 4;
  static constexpr int kChunks = T::BM / kRowStep;
  const uint16_t* src;
  int ld, M, m0, red_begin, red_end, k8;
  uint32_t regs[kAsync ? 1 : kChunks][4];

  __device__ __forceinline__ RowsA(const uint16_t* src_, int ld_, int M_, int m0_, int red_begin_, int red_end_)
      : src(src_), ld(ld_), M(M_), m0(m0_), red_begin(red_begin_), red_end(red_end_), k8(int(threadIdx.x) % 4) {}
  __device__ __forceinline__ static int row(int i) { return int(threadIdx.x) / 4 + i * kRowStep; }

  // Needs ld % 8 == 0, red_end % 8 == 0 and a 16-byte aligned src (whole chunks in or out).
  __device__ __forceinline__ void copy(int step, uint16_t* sA) const {
    const int red = red_begin + step * T::BK + k8 * 8;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int m = m0 + row(i);
      const bool ok = m < M && red < red_end;
      cp_async_16(sA + row(i) * T::kLdA + k8 * 8, ok ? src + int64_t(m) * ld + red : src, ok);
    }
  }
  __device__ __forceinline__ void load(int step) {
    if constexpr (!kAsync) {
      const int red = red_begin + step * T::BK + k8 * 8;
#pragma unroll
      for (int i = 0; i < kChunks; ++i) {
        const int m = m0 + row(i);
        const uint16_t* p = src + int64_t(m < M ? m : 0) * ld + red;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t lo = load_bf16_or_zero(p + 2 * j, (m < M) & (red + 2 * j < red_end));
          const uint32_t hi = load_bf16_or_zero(p + 2 * j + 1, (m < M) & (red + 2 * j + 1 < red_end));
          regs[i][j] = lo | (hi << 16);
        }
      }
    }
  }
  __device__ __forceinline__ void store(uint16_t* sA) const {
    if constexpr (!kAsync) {
#pragma unroll
      for (int i = 0; i < kChunks; ++i)
        *reinterpret_cast<uint4*>(sA + row(i) * T::kLdA + k8 * 8) =
            make_uint4(regs[i][0], regs[i][1], regs[i][2], regs[i][3]);
    }
  }
};

// ---- loaders: B gathered, tile [BK][BN] (reduction rows, columns contiguous in shared memory) ----
// Element (red, col) = src[col.off + tap.off] where decode.valid(col, tap), else 0. Thread t keeps
// the 8 columns of chunk t % (BN / 8) (decoded once) and loads reduction rows t / (BN / 8) + i * step.
// kMask (R*S <= 32): validity is bit tap.rs of the column's window_mask, one AND per element.
template <class T, class Decode, bool kMask>
struct GatherKN {
  static constexpr int kColChunks = T::BN / 8;
  static constexpr int kRowStep = T::kThreads / kColChunks;
  static constexpr int kRows = T::BK / kRowStep;
  const uint16_t* src;
  const Decode& dec;  // in the kernel's (grid-constant) parameters
  int red_begin, red_end, c8;
  Tap col[kMask ? 1 : 8];
  int col_off[8];
  uint32_t col_mask[8];
  uint32_t regs[kRows][4];

  __device__ __forceinline__ GatherKN(const uint16_t* src_, const Decode& dec_, int n0, int ncols, int red_begin_,
                                      int red_end_)
      : src(src_), dec(dec_), red_begin(red_begin_), red_end(red_end_), c8(int(threadIdx.x) % kColChunks) {
    Tap cols[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int c = n0 + c8 * 8 + j;
      cols[j] = c < ncols ? dec.column(c) : invalid_tap();
      col_off[j] = cols[j].off;
      if constexpr (!kMask) col[j] = cols[j];
    }
    if constexpr (kMask) window_masks(dec, cols, col_mask);
  }
  __device__ __forceinline__ static int row(int i) { return int(threadIdx.x) / kColChunks + i * kRowStep; }
  __device__ __forceinline__ void load(int step) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int red = red_begin + step * T::BK + row(i);
      const Tap t = red < red_end ? dec.tap(red) : invalid_tap();
      const uint32_t bit = red < red_end ? 1u << t.rs : 0u;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        bool ok0, ok1;
        if constexpr (kMask) {
          ok0 = (col_mask[2 * j] & bit) != 0;
          ok1 = (col_mask[2 * j + 1] & bit) != 0;
        } else {
          ok0 = dec.valid(col[2 * j], t);
          ok1 = dec.valid(col[2 * j + 1], t);
        }
        const uint32_t lo = load_bf16_or_zero(src + (col_off[2 * j] + t.off), ok0);
        const uint32_t hi = load_bf16_or_zero(src + (col_off[2 * j + 1] + t.off), ok1);
        regs[i][j] = lo | (hi << 16);
      }
    }
  }
  __device__ __forceinline__ void store(uint16_t* sB) const {
#pragma unroll
    for (int i = 0; i < kRows; ++i)
      *reinterpret_cast<uint4*>(sB + row(i) * T::kLdBkn + c8 * 8) =
          make_uint4(regs[i][0], regs[i][1], regs[i][2], regs[i][3]);
  }
};

// A (rows) and B (gathered [BK][BN]) as one loader for the main loop.
template <class A, class B>
struct PairLoader {
  static constexpr bool kAsyncA = A::kAsyncA;
  A a;
  B b;
  __device__ __forceinline__ void copy(int step, uint16_t* sA) const { a.copy(step, sA); }
  __device__ __forceinline__ void load(int step) {
    a.load(step);
    b.load(step);
  }
  __device__ __forceinline__ void store(uint16_t* sA, uint16_t* sB) const {
    a.store(sA);
    b.store(sB);
  }
};

// This thread's warp position in the block tile and lane, and where its accumulator fragments sit:
// rows row(mi, half) and columns col(ni), col(ni) + 1 of the block tile (the C layout of mma).
template <class T>
struct Fragments {
  int lane, wm, wn;
  __device__ __forceinline__ Fragments()
      : lane(int(threadIdx.x) % 32), wm(int(threadIdx.x) / 32 / T::WARPS_N), wn(int(threadIdx.x) / 32 % T::WARPS_N) {}
  __device__ __forceinline__ int row(int mi, int half) const { return wm * T::WTM + mi * 16 + (lane >> 2) + half * 8; }
  __device__ __forceinline__ int col(int ni) const { return wn * T::WTN + ni * 8 + (lane & 3) * 2; }
};

// ---- main loop ----
template <class T, bool kKN>
__device__ __forceinline__ void mma_step(const uint16_t* sA, const uint16_t* sB, float (&acc)[T::MI][T::NI][4],
                                         int wm, int wn, int lane) {
#pragma unroll
  for (int kk = 0; kk < T::BK; kk += 16) {
    uint32_t a[T::MI][4], b[T::NI][2];
#pragma unroll
    for (int mi = 0; mi < T::MI; ++mi)
      ldmatrix_x4(a[mi], sA + (wm * T::WTM + mi * 16 + (lane & 15)) * T::kLdA + kk + (lane >> 4) * 8);
#pragma unroll
    for (int nj = 0; nj < T::NI / 2; ++nj) {
      uint32_t r[4];
      if constexpr (kKN)
        ldmatrix_x4_trans(r, sB + (kk + (lane & 7) + ((lane >> 3) & 1) * 8) * T::kLdBkn + wn * T::WTN + nj * 16 +
                                 (lane >> 4) * 8);
      else
        ldmatrix_x4(r, sB + (wn * T::WTN + nj * 16 + (lane & 7) + (lane >> 4) * 8) * T::kLdBnk + kk +
                           ((lane >> 3) & 1) * 8);
      split_b_x4(b, nj, r);
    }
    mma_tile(acc, a, b);
  }
}

// acc = A (BM x R) * B (R x BN) over `steps` reduction steps; kKN: B tile is [BK][BN]. Ends with a
// barrier, so the caller may reuse the shared memory.
template <class T, bool kKN, class L>
__device__ __forceinline__ void mainloop(L& ld, int steps, float (&acc)[T::MI][T::NI][4], uint16_t* sA,
                                         uint16_t* sB) {
  constexpr int kBStage = kKN ? T::kBStageKN : T::kBStageNK;
  const Fragments<T> f;
  zero_acc(acc);
  if (steps <= 0) return;
  if constexpr (L::kAsyncA) {
#pragma unroll
    for (int s = 0; s < T::STAGES - 1; ++s) {
      if (s < steps) ld.copy(s, sA + s * T::kAStage);
      cp_async_commit();
    }
  }
  ld.load(0);
  ld.store(sA, sB);
  if (steps > 1) ld.load(1);
  for (int kt = 0; kt < steps; ++kt) {
    if constexpr (L::kAsyncA) cp_async_wait<T::STAGES - 2>();
    __syncthreads();  // step kt is in shared memory; step kt - 1's buffers are free
    if constexpr (L::kAsyncA) {
      const int next = kt + T::STAGES - 1;
      if (next < steps) ld.copy(next, sA + (next % T::STAGES) * T::kAStage);
      cp_async_commit();
    }
    if (kt + 1 < steps) {
      ld.store(sA + ((kt + 1) & 1) * T::kAStage, sB + ((kt + 1) & 1) * kBStage);
      if (kt + 2 < steps) ld.load(kt + 2);
    }
    const int a_stage = L::kAsyncA ? kt % T::STAGES : (kt & 1);
    mma_step<T, kKN>(sA + a_stage * T::kAStage, sB + (kt & 1) * kBStage, acc, f.wm, f.wn, f.lane);
  }
  if constexpr (L::kAsyncA) cp_async_wait<0>();
  __syncthreads();
}

// ---- epilogues ----
// out (M, ncols) FP32 row-major = acc (+ nothing): split partial sums, filter gradients. pairs:
// ncols even and out 8-byte aligned, so columns 2t, 2t+1 go out as one float2.
template <class T>
__device__ __forceinline__ void store_rows_fp32(const float (&acc)[T::MI][T::NI][4], float* out, int M, int ncols,
                                                int m0, int n0, bool pairs) {
  const Fragments<T> f;
#pragma unroll
  for (int mi = 0; mi < T::MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = m0 + f.row(mi, half);
      if (m >= M) continue;
#pragma unroll
      for (int ni = 0; ni < T::NI; ++ni) {
        const int n = n0 + f.col(ni);
        float* p = out + int64_t(m) * ncols + n;
        const float v0 = acc[mi][ni][2 * half], v1 = acc[mi][ni][2 * half + 1];
        if (pairs && n + 1 < ncols) {
          *reinterpret_cast<float2*>(p) = make_float2(v0, v1);
        } else {
          if (n < ncols) p[0] = v0;
          if (n + 1 < ncols) p[1] = v1;
        }
      }
    }
}

// Column col of the GEMM output lives in image col / plane at position col % plane of its plane.
struct PlaneOut {
  Div div_plane;
  int plane;     // P*Q (forward) or H*W (data gradient)
  bool vec;      // plane % 8 == 0 and a 16-byte aligned output: 8 columns are one 16-byte store
};

// out (N, M, plane) BF16 = acc + bias[m] (FP32, or null), rounded once. The tile goes through
// shared memory (sC, [BM][BN + 8]) so that each thread writes 8 contiguous columns of one row.
template <class T>
__device__ __forceinline__ void store_nchw_bf16(const float (&acc)[T::MI][T::NI][4], const float* bias,
                                                uint16_t* out, int M, int ncols, const PlaneOut& po, int m0, int n0,
                                                uint16_t* sC) {
  const Fragments<T> f;
#pragma unroll
  for (int mi = 0; mi < T::MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int ml = f.row(mi, half);
      const float bv = (bias && m0 + ml < M) ? __ldg(bias + m0 + ml) : 0.0f;
#pragma unroll
      for (int ni = 0; ni < T::NI; ++ni) {
        const int nl = f.col(ni);
        *reinterpret_cast<uint32_t*>(sC + ml * T::kLdC + nl) =
            pack_bf16x2(acc[mi][ni][2 * half] + bv, acc[mi][ni][2 * half + 1] + bv);
      }
    }
  __syncthreads();
  constexpr int kChunksPerRow = T::BN / 8;
  for (int id = int(threadIdx.x); id < T::BM * kChunksPerRow; id += T::kThreads) {
    const int ml = id / kChunksPerRow, c8 = id % kChunksPerRow;
    const int m = m0 + ml, col = n0 + c8 * 8;
    if (m >= M || col >= ncols) continue;
    const uint16_t* s = sC + ml * T::kLdC + c8 * 8;
    int n, pos;
    po.div_plane.divmod(col, n, pos);
    if (po.vec && col + 8 <= ncols) {
      *reinterpret_cast<uint4*>(out + (int64_t(n) * M + m) * po.plane + pos) = *reinterpret_cast<const uint4*>(s);
      continue;
    }
    for (int j = 0; j < 8 && col + j < ncols; ++j) {
      out[(int64_t(n) * M + m) * po.plane + pos] = s[j];
      if (++pos == po.plane) pos = 0, ++n;
    }
  }
}

// ---- launch helpers (host) ----
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

}  // namespace cnn::igemm_bf16_detail
