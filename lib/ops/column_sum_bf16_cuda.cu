// Deterministic FP32 column sums of a BF16, F16 or FP32 matrix on the GPU (column_sum_bf16.h; E, the
// element type, is the chunk kernel's template parameter, half16.cuh): the first kernel
// sums each chunk of rows per column (16-byte loads of 8 16-bit or 4 FP32 columns where the matrix
// allows), the second adds the chunks' partials in chunk order.
// Trap: the 16-byte and the scalar kernel cut a chunk into different slices (32 and 8), so their
// bits differ; each is deterministic, and a given buffer always takes the same one.
#include <cuda_runtime.h>

#include <climits>
#include <type_traits>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/column_sum_bf16.h"
#include "ops/half16.cuh"
#include "ops/reduce.cuh"

namespace cnn {

static constexpr int kThreads = 256;

// What a matrix element is read as: its 16 bits (bf16, f16), or the float.
template <class E>
using Bits = std::conditional_t<std::is_same_v<E, float>, float, uint16_t>;

// Block (column tile, chunk): kSlices row slices x (kThreads / kSlices) groups of kVec adjacent
// columns. Slice s sums rows begin + s, begin + s + kSlices, ... (below the chunk's end) in order;
// then thread t < kCols adds the slices of the tile's column t in slice order.
template <class E, int kVec, int kSlices>
static __global__ void __launch_bounds__(kThreads)
    column_sum_chunk_kernel(int64_t rows, int cols, int64_t chunk_rows,
                            const Bits<E>* __restrict__ x,  // (rows, cols) E bits
                            float* __restrict__ out) {      // (chunks, cols): partials, or the sums
  constexpr int kGroups = kThreads / kSlices, kCols = kGroups * kVec;
  __shared__ float part[kSlices][kCols + 1];
  const int g = int(threadIdx.x) % kGroups, s = int(threadIdx.x) / kGroups;
  const int col0 = int(blockIdx.x) * kCols + g * kVec;
  const int64_t begin = int64_t(blockIdx.y) * chunk_rows;
  const int64_t end = rows < begin + chunk_rows ? rows : begin + chunk_rows;
  float acc[kVec];
#pragma unroll
  for (int j = 0; j < kVec; ++j) acc[j] = 0.0f;
  if (col0 < cols) {  // kVec > 1 needs cols % kVec == 0, so the whole group is inside
#pragma unroll 4
    for (int64_t r = begin + s; r < end; r += kSlices) {
      const Bits<E>* p = x + r * cols + col0;
      if constexpr (std::is_same_v<E, float>) {
        if constexpr (kVec == 4) {
          const float4 v = __ldg(reinterpret_cast<const float4*>(p));
          acc[0] += v.x, acc[1] += v.y, acc[2] += v.z, acc[3] += v.w;
        } else {
          acc[0] += __ldg(p);
        }
      } else if constexpr (kVec == 8) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[2 * j] += Half16<E>::lo(w[j]);
          acc[2 * j + 1] += Half16<E>::hi(w[j]);
        }
      } else {
        acc[0] += Half16<E>::to_float(__ldg(p));
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kVec; ++j) part[s][g * kVec + j] = acc[j];
  __syncthreads();
  const int t = int(threadIdx.x), col = int(blockIdx.x) * kCols + t;
  if (t < kCols && col < cols) {
    float total = 0.0f;
#pragma unroll
    for (int i = 0; i < kSlices; ++i) total += part[i][t];
    out[int64_t(blockIdx.y) * cols + col] = total;
  }
}

// sum[c] = the chunks' partials of column c added in chunk order.
static __global__ void __launch_bounds__(kThreads)
    column_sum_partials_kernel(int chunks, int cols,
                               const float* __restrict__ partials,  // (chunks, cols)
                               float* __restrict__ sum) {           // (cols)
  const int col = int(blockIdx.x) * kThreads + int(threadIdx.x);
  if (col >= cols) return;
  float total = 0.0f;
  for (int c = 0; c < chunks; ++c) total += __ldg(partials + int64_t(c) * cols + col);
  sum[col] = total;
}

template <class E>
static void column_sum(const ExecContext& ctx, int64_t rows, int64_t cols, const E* x, float* sum, float* scratch,
                       const char* what) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  CNN_CHECK(rows >= 1 && cols >= 1 && cols <= INT_MAX, "{}: expected 1 <= rows and 1 <= cols < 2^31, got ({}, {})",
            what, rows, cols);
  const int64_t chunk_rows = column_sum_bf16_chunk_rows(rows), chunks = column_sum_bf16_chunks(rows);
  CNN_CHECK(chunks == 1 || scratch, "{}: {} rows make {} chunks, whose partials need scratch", what, rows, chunks);
  float* out = chunks == 1 ? sum : scratch;
  const auto* bits = reinterpret_cast<const Bits<E>*>(x);
  const int c = int(cols);
  if constexpr (std::is_same_v<E, float>) {
    const dim3 grid(unsigned((cols + 31) / 32), unsigned(chunks));  // 32 columns a block either way
    if (cols % 4 == 0 && cuda::aligned16(x))
      column_sum_chunk_kernel<E, 4, 32><<<grid, kThreads, 0, stream>>>(rows, c, chunk_rows, bits, out);
    else
      column_sum_chunk_kernel<E, 1, 8><<<grid, kThreads, 0, stream>>>(rows, c, chunk_rows, bits, out);
  } else if (cols % 8 == 0 && cuda::aligned16(x)) {
    const dim3 grid(unsigned((cols + 63) / 64), unsigned(chunks));
    column_sum_chunk_kernel<E, 8, 32><<<grid, kThreads, 0, stream>>>(rows, c, chunk_rows, bits, out);
  } else {
    const dim3 grid(unsigned((cols + 31) / 32), unsigned(chunks));
    column_sum_chunk_kernel<E, 1, 8><<<grid, kThreads, 0, stream>>>(rows, c, chunk_rows, bits, out);
  }
  CUDA_CHECK_LAUNCH(what);
  if (chunks == 1) return;
  column_sum_partials_kernel<<<unsigned((cols + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      int(chunks), c, scratch, sum);
  CUDA_CHECK_LAUNCH(what);
}

void column_sum_cuda(const ExecContext& ctx, int64_t rows, int64_t cols, const bf16* x, float* sum, float* scratch) {
  column_sum(ctx, rows, cols, x, sum, scratch, "column sum bf16");
}
void column_sum_cuda(const ExecContext& ctx, int64_t rows, int64_t cols, const f16* x, float* sum, float* scratch) {
  column_sum(ctx, rows, cols, x, sum, scratch, "column sum f16");
}
void column_sum_cuda(const ExecContext& ctx, int64_t rows, int64_t cols, const float* x, float* sum, float* scratch) {
  column_sum(ctx, rows, cols, x, sum, scratch, "column sum f32");
}

}  // namespace cnn
