// Device code shared by the .cu files of lib/ops and lib/optim: deterministic warp/block sums,
// grid sizing for grid-stride loops, and the stream of a context. For .cu files only.
// Trap: a block sum is deterministic only for a fixed block size, so every caller passes it as a
// template constant; the summation tree is part of the result (never size blocks by occupancy).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "core/exec_context.h"

namespace cnn::cuda {

inline constexpr int kWarpSize = 32;

// Butterfly sum: every lane ends with the same value (a + b == b + a), in a fixed order.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block, returned to every thread. `shared` holds kThreads / 32 values; the leading
// barrier lets consecutive calls reuse it.
template <int kThreads, typename T>
__device__ __forceinline__ T block_sum(T v, T* shared) {
  static_assert(kThreads % kWarpSize == 0 && kThreads <= 1024, "block size must be whole warps");
  constexpr int kWarps = kThreads / kWarpSize;
  v = warp_sum(v);
  __syncthreads();
  if ((threadIdx.x & (kWarpSize - 1)) == 0) shared[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  T total = shared[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) total += shared[w];
  return total;
}

// Blocks that fill the GPU twice over, the target of shape-derived tile and split choices: two
// 256-thread blocks on each of an H200's 132 SMs. A constant, not the device's count, so those
// choices (and so summation orders) depend on the shape alone.
inline constexpr int64_t kFillBlocks = 264;

// Blocks for a grid-stride loop over `work` items at `per_block` items per block and sweep. The
// cap keeps a few waves on a large GPU; results never depend on it (those loops are elementwise).
inline unsigned grid_blocks(int64_t work, int64_t per_block, int64_t cap = 8192) {
  int64_t blocks = (work + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks);
}

// n / d for 0 <= n < 2^31 and a divisor fixed on the host, by a multiply-high and a shift
// (Granlund & Montgomery 1994; PyTorch's IntDivider): a plain integer division is a ~20-instruction
// sequence on the GPU, which dominates index arithmetic in memory-bound kernels.
struct FastDiv32 {
  using Index = int32_t;
  uint32_t divisor = 1, mul = 0, shift = 0;
  FastDiv32() = default;
  explicit FastDiv32(int64_t d) : divisor(static_cast<uint32_t>(d)) {
    while (shift < 31 && (uint32_t{1} << shift) < divisor) ++shift;
    const uint64_t one = 1;
    mul = static_cast<uint32_t>(((one << 32) * ((one << shift) - divisor)) / divisor + 1);
  }
  __device__ __forceinline__ int32_t div(int32_t n) const {
    const uint32_t t = __umulhi(static_cast<uint32_t>(n), mul);
    return static_cast<int32_t>((t + static_cast<uint32_t>(n)) >> shift);
  }
};
// The same interface for indices past 2^31.
struct PlainDiv64 {
  using Index = int64_t;
  int64_t divisor = 1;
  PlainDiv64() = default;
  explicit PlainDiv64(int64_t d) : divisor(d) {}
  __device__ __forceinline__ int64_t div(int64_t n) const { return n / divisor; }
};

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

inline bool fits_int32(int64_t n) { return n <= int64_t{0x7fffffff}; }

// The context's stream; a CPU context here is a caller bug that would pass host pointers to kernels.
inline cudaStream_t stream_of(const ExecContext& ctx, const char* what) {
  if (ctx.device != Device::cuda)
    CNN_THROW("{}: needs a CUDA execution context, got a {} one", what, to_string(ctx.device));
  return static_cast<cudaStream_t>(ctx.cuda_stream);
}

// Scratch from the context's device workspace, in bytes rounded up to whole floats.
inline void* workspace_bytes(const ExecContext& ctx, size_t bytes, const char* what) {
  if (!ctx.workspace || ctx.workspace->device() != Device::cuda)
    CNN_THROW("{}: the CUDA execution context has no device workspace", what);
  return ctx.workspace->get((bytes + sizeof(float) - 1) / sizeof(float));
}

// At least `count` zeroed unsigned ints of the context's device for arrive_last, kept in its
// context cache (arrival_counters_cuda.cu): every kernel leaves the counters it used at zero, so
// one set serves all kernels of the stream. Growing allocates, which must not happen during
// stream capture (a CUDA graph's warm-up step runs uncaptured); earlier sets stay alive for the
// graphs that captured them.
unsigned* arrival_counters(const ExecContext& ctx, size_t count, const char* what);

// Called by every thread of a block once the block has made the stores the group's other blocks
// must see: true in every thread of the block that arrives last among the `group_size` blocks
// counting on `counter`, which then sees the other blocks' stores (every thread fences before its
// block arrives) and resets the counter to zero for the next kernel. Its reads of them should bypass L1 (__ldcg).
__device__ __forceinline__ bool arrive_last(unsigned* __restrict__ counter, unsigned group_size) {
  __shared__ bool last;
  __threadfence();  // this thread's stores, before the block arrives
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned before = atomicAdd(counter, 1u);
    last = before + 1 == group_size;
    if (last) {
      *counter = 0;
      __threadfence();  // the others' stores, before this block reads them
    }
  }
  __syncthreads();
  return last;
}

}  // namespace cnn::cuda
