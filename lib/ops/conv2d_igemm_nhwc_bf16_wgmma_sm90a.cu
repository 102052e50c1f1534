// The sm_90a (Hopper) wgmma kernels of the NHWC BF16/F16 implicit GEMM (conv2d_igemm_nhwc_bf16_wgmma.h):
// the loaders of conv2d_igemm_nhwc_bf16.cuh copy 64-element reduction steps by cp.async into a
// ring of 128-byte-swizzled shared tiles, and each warpgroup (4 warps) multiplies its 64 rows of A
// by the whole B tile with wgmma.mma_async m64nNk16 (FP32 accumulators in registers), keeping one
// step's wgmma group in flight while the next step's copies land.
//   forward, backward data   A and B reduction-contiguous (K-major): row r of a tile at r * 128
//                            bytes, its 16-byte chunk c at chunk c ^ (r % 8)
//   backward filter          A and B pixel-major (M- / N-major): per 64 columns an atom of 64
//                            reduction rows x 128 bytes, chunk c of row r at c ^ (r % 8)
// Descriptors (PTX ISA, matrix descriptor): start address, leading byte offset (MN-major: bytes
// from one 64-column atom to the next; unused K-major), stride byte offset (1024: 8 rows of 128
// bytes), swizzle mode 1 (128 bytes). A k16 slice starts 32 bytes (K-major) or 16 rows (MN-major)
// further; every tile starts 1024-byte aligned, as the swizzle needs.
// Ring: with S stages, S - 2 steps of copies in flight. After the barrier of step kt a warpgroup
// issues step kt's wgmma and the copies of step kt + S - 2 into the buffer of step kt - 2 (every
// warpgroup waited for that step's wgmma before the barrier), then waits for step kt - 1's wgmma.
// Trap: cp.async writes through the generic proxy and wgmma reads through the async proxy: each
// thread fences (fence.proxy.async) after its copies land and before the barrier.
// Trap: this file is compiled for sm_90a alone (lib/CMakeLists.txt); the mma.sync tiles serve
// every other device.
#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d_igemm_nhwc_bf16.cuh"
#include "ops/conv2d_igemm_nhwc_bf16.h"
#include "ops/conv2d_igemm_nhwc_bf16_wgmma.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "conv2d_igemm_nhwc_bf16_wgmma_sm90a.cu is built for sm_90a only (-gencode=arch=compute_90a,code=sm_90a)"
#endif

namespace cnn::igemm_nhwc_bf16_detail {

using igemm_bf16_detail::shared_address;

// BM x BN block tile of BM / 64 warpgroups, reduction step 64, STAGES-deep ring of swizzled tiles.
template <int BM_, int BN_, int STAGES_, int MIN_BLOCKS_>
struct WgTile {
  static constexpr int BM = BM_, BN = BN_, BK = 64, STAGES = STAGES_, kMinBlocks = MIN_BLOCKS_;
  static constexpr int kGroups = BM / 64, kThreads = 128 * kGroups;
  static constexpr int kAElems = BM * BK, kBElems = BN * BK;
  static_assert(BM % 64 == 0 && BN % 64 == 0 && STAGES >= 3, "whole 64-row atoms; two steps of copies in flight");
  // Element offsets of chunk c8 of a row: K-major (row = M / N index) and MN-major (row = reduction index).
  __device__ __forceinline__ static int k_off(int row, int c8) { return row * 64 + ((c8 ^ (row & 7)) << 3); }
  __device__ __forceinline__ static int am_off(int row, int c8) {
    return (c8 >> 3) * (BK * 64) + row * 64 + (((c8 & 7) ^ (row & 7)) << 3);
  }
  __device__ __forceinline__ static int bn_off(int row, int c8) { return am_off(row, c8); }
  // The ring (or the epilogue's bf16 tile) plus 1024 bytes to align it.
  static constexpr int smem_bytes() {
    const int pipe = 2 * STAGES * (kAElems + kBElems), out = 2 * BM * (BN + 8);
    return (pipe > out ? pipe : out) + 1024;
  }
};

// The wgmma tiles, by index from kIgemmNhwcBf16WgmmaFirst (conv2d_igemm_nhwc_bf16.h).
using WgTile8 = WgTile<128, 256, 4, 1>;
using WgTile9 = WgTile<128, 128, 5, 1>;
using WgTile10 = WgTile<128, 64, 4, 2>;
using WgTile11 = WgTile<64, 256, 4, 1>;

template <class Fn>
static void with_wg_tile(int tile, Fn&& fn) {
  switch (tile - kIgemmNhwcBf16WgmmaFirst) {
    case 0:
      return fn(WgTile8{});
    case 1:
      return fn(WgTile9{});
    case 2:
      return fn(WgTile10{});
    case 3:
      return fn(WgTile11{});
    default:
      CNN_THROW("igemm nhwc bf16: tile {} is not a wgmma tile", tile);
  }
}

// ---- PTX ----
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous region.
template <int N>
__device__ __forceinline__ void fence_acc(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Matrix descriptor of a 128-byte-swizzled shared tile at p.
__device__ __forceinline__ uint64_t wg_desc(const uint16_t* p, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return uint64_t((shared_address(p) & 0x3ffffu) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3fffu) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3fffu) << 32) | (uint64_t(1) << 62);
}

// d (64 x N, FP32) += A (64 x 16, descriptor) * B (16 x N, descriptor); kTA / kTB: M- / N-major.
#define CNN_WGMMA_M64N64(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" \
      "}, %32, %33, p, 1, 1, %35, %36;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]) \
      : "l"(da), "l"(db), "r"(1), "n"(kTA), "n"(kTB))
template <class E, int kTA, int kTB>
__device__ __forceinline__ void wgmma_m64n64(float (&d)[32], uint64_t da, uint64_t db) {
  if constexpr (std::is_same_v<E, f16>)
    CNN_WGMMA_M64N64("f16");
  else
    CNN_WGMMA_M64N64("bf16");
}

#define CNN_WGMMA_M64N128(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" \
      "}, %64, %65, p, 1, 1, %67, %68;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
      : "l"(da), "l"(db), "r"(1), "n"(kTA), "n"(kTB))
template <class E, int kTA, int kTB>
__device__ __forceinline__ void wgmma_m64n128(float (&d)[64], uint64_t da, uint64_t db) {
  if constexpr (std::is_same_v<E, f16>)
    CNN_WGMMA_M64N128("f16");
  else
    CNN_WGMMA_M64N128("bf16");
}

#define CNN_WGMMA_M64N256(TY) \
  asm volatile( \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {" \
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
      "}, %128, %129, p, 1, 1, %131, %132;\n}\n" \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), \
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), \
        "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), \
        "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), \
        "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), \
        "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), \
        "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), \
        "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), \
        "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
      : "l"(da), "l"(db), "r"(1), "n"(kTA), "n"(kTB))
template <class E, int kTA, int kTB>
__device__ __forceinline__ void wgmma_m64n256(float (&d)[128], uint64_t da, uint64_t db) {
  if constexpr (std::is_same_v<E, f16>)
    CNN_WGMMA_M64N256("f16");
  else
    CNN_WGMMA_M64N256("bf16");
}
template <class E, int N, bool kAmn, bool kBmn>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], uint64_t da, uint64_t db) {
  if constexpr (N == 64)
    wgmma_m64n64<E, kAmn, kBmn>(d, da, db);
  else if constexpr (N == 128)
    wgmma_m64n128<E, kAmn, kBmn>(d, da, db);
  else
    wgmma_m64n256<E, kAmn, kBmn>(d, da, db);
}

// ---- main loop ----
// acc (this warpgroup's 64 rows x BN) = A * B (of E elements) over `steps` reduction steps of 64.
// Ends with every wgmma complete and a barrier, so the caller may reuse the shared memory.
template <class E, class W, bool kAmn, bool kBmn, class L>
__device__ __forceinline__ void wg_mainloop(const L& ld, int steps, float (&acc)[W::BN / 2], uint16_t* smem) {
  constexpr int kStage = W::kAElems + W::kBElems;
  // This warpgroup's A: rows 64 wg.. (K-major) or the wg-th 64-column atom (MN-major), both 64 * 64 elements in.
  const int a_off = int(threadIdx.x) / 128 * 64 * W::BK;
#pragma unroll
  for (int i = 0; i < W::BN / 2; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int s = 0; s < W::STAGES - 2; ++s) {
    if (s < steps) ld.load(s, smem + s * kStage, smem + s * kStage + W::kAElems);
    cp_async_commit();
  }
  int read = 0, write = W::STAGES - 2;
  for (int kt = 0; kt < steps; ++kt) {
    cp_async_wait<W::STAGES - 3>();
    fence_proxy_async();
    __syncthreads();  // step kt is in shared memory; every warpgroup is done with step kt - 2
    // The copies of step kt + S - 2 go into step kt - 2's buffer. The filter gradient issues them
    // after step kt's wgmma, so their address arithmetic (a window decoded per pixel row) overlaps
    // the tensor cores; forward and data gradient issue them first: on the H200 that order ran
    // their large layers 4-8% faster than wgmma first (bench/RESULTS.md, 2026-12-02).
    if constexpr (!kAmn) {
      if (kt + W::STAGES - 2 < steps)
        ld.load(kt + W::STAGES - 2, smem + write * kStage, smem + write * kStage + W::kAElems);
      cp_async_commit();
    }
    const uint16_t* sA = smem + read * kStage + a_off;
    const uint16_t* sB = smem + read * kStage + W::kAElems;
    fence_acc(acc);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < W::BK / 16; ++k) {
      const uint64_t da = kAmn ? wg_desc(sA + k * 16 * 64, W::BK * 128, 1024) : wg_desc(sA + k * 16, 16, 1024);
      const uint64_t db = kBmn ? wg_desc(sB + k * 16 * 64, W::BK * 128, 1024) : wg_desc(sB + k * 16, 16, 1024);
      wgmma<E, W::BN, kAmn, kBmn>(acc, da, db);
    }
    wgmma_commit();
    fence_acc(acc);
    if constexpr (kAmn) {
      if (kt + W::STAGES - 2 < steps)
        ld.load(kt + W::STAGES - 2, smem + write * kStage, smem + write * kStage + W::kAElems);
      cp_async_commit();
    }
    wgmma_wait<1>();  // step kt - 1's group is done: its buffer is free after the next barrier
    fence_acc(acc);
    read = read + 1 == W::STAGES ? 0 : read + 1;
    write = write + 1 == W::STAGES ? 0 : write + 1;
  }
  wgmma_wait<0>();
  fence_acc(acc);
  cp_async_wait<0>();
  __syncthreads();
}

// Every accumulator pair (row, col), (row, col + 1) of a wgmma block tile: warp w of warpgroup g
// holds rows 64 g + 16 w + lane / 4 (+ 8), columns 8 i + 2 (lane % 4) (+ 1).
template <class W, class Fn>
__device__ __forceinline__ void for_each_pair_wg(const float (&acc)[W::BN / 2], Fn&& fn) {
  const int t = int(threadIdx.x), lane = t % 32;
  const int row = t / 128 * 64 + t % 128 / 32 * 16 + lane / 4, col = lane % 4 * 2;
#pragma unroll
  for (int i = 0; i < W::BN / 8; ++i) {
    fn(row, 8 * i + col, acc[4 * i], acc[4 * i + 1]);
    fn(row + 8, 8 * i + col, acc[4 * i + 2], acc[4 * i + 3]);
  }
}

__device__ __forceinline__ uint16_t* aligned_smem(unsigned char* raw) {
  return reinterpret_cast<uint16_t*>(raw + ((1024u - (shared_address(raw) & 1023u)) & 1023u));
}

template <class E, class W, bool kData>
static __global__ void __launch_bounds__(W::kThreads, W::kMinBlocks)
    conv2d_gather_igemm_nhwc_wgmma_kernel(const __grid_constant__ GatherGemmParams p,
                                               const uint16_t* __restrict__ a_src,  // x (N,H,W,C) or dy (N,P,Q,K)
                                               const uint16_t* __restrict__ b_src,  // w (K,R,S,C) or wt (C,R,S,K)
                                               const float* __restrict__ bias,      // (N) or null
                                               uint16_t* __restrict__ out,          // (M, N): y or dx
                                               float* __restrict__ parts) {         // (splits, M, N) if split
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* smem = aligned_smem(smem_raw);
  int m0, n0;
  block_origin<W>(p.N, m0, n0);
  const int red_begin = int(blockIdx.z) * p.chunk, red_end = min(p.red, red_begin + p.chunk);
  const PairLoader<GatherRows<W, true, kData>, PlainRows<W, true>> ld{
      GatherRows<W, true, kData>(p.g, a_src, p.M, m0, red_begin, red_end),
      PlainRows<W, true>(b_src, p.red, p.N, n0, red_begin, red_end)};
  float acc[W::BN / 2];
  wg_mainloop<E, W, false, false>(ld, (red_end - red_begin + W::BK - 1) / W::BK, acc, smem);
  auto each = [&](auto&& fn) { for_each_pair_wg<W>(acc, fn); };
  if (gridDim.z > 1)
    store_rows_fp32(each, parts + int64_t(blockIdx.z) * p.M * p.N, p.M, p.N, m0, n0);
  else
    store_rows_half16<E, W::BM, W::BN, W::kThreads>(each, bias, p.relu, out, p.M, p.N, m0, n0, p.vec_out, smem);
}

template <class E, class W>
static __global__ void __launch_bounds__(W::kThreads, W::kMinBlocks)
    conv2d_backward_filter_igemm_nhwc_wgmma_kernel(const __grid_constant__ FilterGemmParams p,
                                                        const uint16_t* __restrict__ x,   // (N, H, W, C)
                                                        const uint16_t* __restrict__ dy,  // (N, P, Q, K)
                                                        float* __restrict__ dw,           // (K, C, R, S)
                                                        float* __restrict__ db,           // (K) or null
                                                        float* __restrict__ parts) {      // (splits, K, N) if split
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* smem = aligned_smem(smem_raw);
  int m0, n0;
  block_origin<W>(p.N, m0, n0);
  const int red_begin = int(blockIdx.z) * p.chunk, red_end = min(p.red, red_begin + p.chunk);
  const PairLoader<DyRows<W, true>, XRows<E, W, true>> ld{DyRows<W, true>(dy, p.M, m0, red_begin, red_end),
                                                          XRows<E, W, true>(p, x, n0, red_begin, red_end)};
  float acc[W::BN / 2];
  wg_mainloop<E, W, true, true>(ld, (red_end - red_begin + W::BK - 1) / W::BK, acc, smem);
  auto each = [&](auto&& fn) { for_each_pair_wg<W>(acc, fn); };
  if (gridDim.z > 1)
    store_rows_fp32(each, parts + int64_t(blockIdx.z) * p.M * p.N, p.M, p.N, m0, n0);
  else
    store_filter(each, p, dw, db, m0, n0);
}

bool igemm_nhwc_bf16_wgmma_usable() {
  static std::atomic<int> known[64];  // per device: 0 unknown, 1 no, 2 yes
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (device < 64 && known[device].load() != 0) return known[device].load() == 2;
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  const bool yes = major == 9 && minor == 0;
  if (device < 64) known[device].store(yes ? 2 : 1);
  return yes;
}

template <class E>
static void gather(cudaStream_t stream, int tile, bool data, int splits, const GatherGemmParams& p,
                   const uint16_t* a_src, const uint16_t* b_src, const float* bias, uint16_t* out, float* parts) {
  const char* what = data ? "conv2d backward data igemm nhwc (wgmma)" : "conv2d forward igemm nhwc (wgmma)";
  CNN_CHECK(igemm_nhwc_bf16_wgmma_usable(), "{} {}: needs a compute capability 9.0 device", what, Half16<E>::kName);
  with_wg_tile(tile, [&](auto w) {
    using W = decltype(w);
    auto kernel = data ? conv2d_gather_igemm_nhwc_wgmma_kernel<E, W, true>
                       : conv2d_gather_igemm_nhwc_wgmma_kernel<E, W, false>;
    launch(what, kernel, gemm_grid<W>(p.M, p.N, splits), W::kThreads, W::smem_bytes(), stream, p, a_src, b_src, bias,
           out, parts);
  });
}

template <class E>
static void filter(cudaStream_t stream, int tile, int splits, const FilterGemmParams& p, const uint16_t* x,
                   const uint16_t* dy, float* dw, float* db, float* parts) {
  const char* what = "conv2d backward filter igemm nhwc (wgmma)";
  CNN_CHECK(igemm_nhwc_bf16_wgmma_usable(), "{} {}: needs a compute capability 9.0 device", what, Half16<E>::kName);
  with_wg_tile(tile, [&](auto w) {
    using W = decltype(w);
    launch(what, conv2d_backward_filter_igemm_nhwc_wgmma_kernel<E, W>, gemm_grid<W>(p.M, p.N, splits), W::kThreads,
           W::smem_bytes(), stream, p, x, dy, dw, db, parts);
  });
}

void igemm_nhwc_bf16_wgmma_gather(DType dtype, cudaStream_t stream, int tile, bool data, int splits,
                                  const GatherGemmParams& p, const uint16_t* a_src, const uint16_t* b_src,
                                  const float* bias, uint16_t* out, float* parts) {
  CNN_CHECK(dtype == DType::bf16 || dtype == DType::f16, "igemm nhwc wgmma: no kernels for dtype {}",
            to_string(dtype));
  (dtype == DType::f16 ? gather<f16> : gather<bf16>)(stream, tile, data, splits, p, a_src, b_src, bias, out, parts);
}

void igemm_nhwc_bf16_wgmma_filter(DType dtype, cudaStream_t stream, int tile, int splits, const FilterGemmParams& p,
                                  const uint16_t* x, const uint16_t* dy, float* dw, float* db, float* parts) {
  CNN_CHECK(dtype == DType::bf16 || dtype == DType::f16, "igemm nhwc wgmma: no kernels for dtype {}",
            to_string(dtype));
  (dtype == DType::f16 ? filter<f16> : filter<bf16>)(stream, tile, splits, p, x, dy, dw, db, parts);
}

}  // namespace cnn::igemm_nhwc_bf16_detail
