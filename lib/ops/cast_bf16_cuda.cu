// FP32 <-> BF16 conversion on the GPU: grid-stride loops, 8 elements a step (two float4 against
// one 16-byte bf16 word) when both buffers are 16-byte aligned, a scalar tail otherwise. The
// rounding is core/bf16.h's (the CPU's bits exactly), not the cvt instruction. float -> f16 (the
// fp16 rows' weight copies) is the same loop with half16.cuh's f16 rounding.
#include "core/cuda_check.h"
#include "ops/cast_bf16.h"
#include "ops/half16.cuh"
#include "ops/reduce.cuh"

namespace cnn {

static constexpr int kThreads = 256;

// Grid-stride loop over n elements: chunk(i) for the n / 8 chunks of 8 when kVec, then one(i) for
// every element after them (all of them when !kVec).
template <bool kVec, class Chunk, class One>
__device__ __forceinline__ void grid_stride_by_8(int64_t n, Chunk chunk, One one) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t n8 = kVec ? n / 8 : 0;
  for (int64_t i = first; i < n8; i += stride) chunk(i);
  for (int64_t i = 8 * n8 + first; i < n; i += stride) one(i);
}

template <class E, bool kVec>
static __global__ void cast_float_to_16_kernel(int64_t n, const float* __restrict__ x,  // (n)
                                               uint16_t* __restrict__ y) {              // (n) E bits
  grid_stride_by_8<kVec>(
      n,
      [&](int64_t i) {
        const float4 a = reinterpret_cast<const float4*>(x)[2 * i];
        const float4 b = reinterpret_cast<const float4*>(x)[2 * i + 1];
        reinterpret_cast<uint4*>(y)[i] = make_uint4(Half16<E>::pack2(a.x, a.y), Half16<E>::pack2(a.z, a.w),
                                                    Half16<E>::pack2(b.x, b.y), Half16<E>::pack2(b.z, b.w));
      },
      [&](int64_t i) { y[i] = Half16<E>::from_float(x[i]); });
}

template <bool kVec>
static __global__ void cast_bf16_to_float_kernel(int64_t n, const uint16_t* __restrict__ x,  // (n) bf16 bits
                                                 float* __restrict__ y) {                   // (n)
  grid_stride_by_8<kVec>(
      n,
      [&](int64_t i) {
        const uint4 v = reinterpret_cast<const uint4*>(x)[i];
        auto lo = [](uint32_t w) { return float_from_bits(w << 16); };
        auto hi = [](uint32_t w) { return float_from_bits(w & 0xffff0000u); };
        reinterpret_cast<float4*>(y)[2 * i] = make_float4(lo(v.x), hi(v.x), lo(v.y), hi(v.y));
        reinterpret_cast<float4*>(y)[2 * i + 1] = make_float4(lo(v.z), hi(v.z), lo(v.w), hi(v.w));
      },
      [&](int64_t i) { y[i] = float_from_bf16_bits(x[i]); });
}

// Launches the vector or the scalar variant of one conversion over n elements.
template <class From, class To>
static void launch_cast(const ExecContext& ctx, int64_t n, const From* x, To* y, const char* what,
                        void (*vec_kernel)(int64_t, const From*, To*), void (*scalar_kernel)(int64_t, const From*, To*)) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  CNN_CHECK(n >= 0, "{}: element count must be non-negative, got {}", what, n);
  if (n == 0) return;
  const bool vec = cuda::aligned16(x) && cuda::aligned16(y);
  (vec ? vec_kernel : scalar_kernel)<<<cuda::grid_blocks(vec ? n / 8 + 1 : n, kThreads), kThreads, 0, stream>>>(n, x,
                                                                                                               y);
  CUDA_CHECK_LAUNCH(what);
}

void cast_float_to_bf16_cuda(const ExecContext& ctx, int64_t n, const float* x, bf16* y) {
  launch_cast(ctx, n, x, reinterpret_cast<uint16_t*>(y), "cast float to bf16", cast_float_to_16_kernel<bf16, true>,
              cast_float_to_16_kernel<bf16, false>);
}

void cast_float_to_f16_cuda(const ExecContext& ctx, int64_t n, const float* x, f16* y) {
  launch_cast(ctx, n, x, reinterpret_cast<uint16_t*>(y), "cast float to f16", cast_float_to_16_kernel<f16, true>,
              cast_float_to_16_kernel<f16, false>);
}

void cast_bf16_to_float_cuda(const ExecContext& ctx, int64_t n, const bf16* x, float* y) {
  launch_cast(ctx, n, reinterpret_cast<const uint16_t*>(x), y, "cast bf16 to float", cast_bf16_to_float_kernel<true>,
              cast_bf16_to_float_kernel<false>);
}

}  // namespace cnn
