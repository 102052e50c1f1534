// FP32 <-> BF16 conversion on the GPU: grid-stride loops, 8 elements a step (two float4 against
// one 16-byte bf16 word) when both buffers are 16-byte aligned, a scalar tail otherwise. The
// rounding is core/bf16.h's (the CPU's bits exactly), not the cvt instruction.
#include "core/cuda_check.h"
#include "ops/cast_bf16.h"
#include "ops/reduce.cuh"

namespace cnn {

static constexpr int kThreads = 256;

template <bool kVec>
static __global__ void cast_float_to_bf16_kernel(int64_t n, const float* __restrict__ x,  // (n)
                                                 uint16_t* __restrict__ y) {              // (n) bf16 bits
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (kVec) {
    const int64_t n8 = n / 8;
    for (int64_t i = first; i < n8; i += stride) {
      const float4 a = reinterpret_cast<const float4*>(x)[2 * i];
      const float4 b = reinterpret_cast<const float4*>(x)[2 * i + 1];
      reinterpret_cast<uint4*>(y)[i] =
          make_uint4(pack_bf16x2(a.x, a.y), pack_bf16x2(a.z, a.w), pack_bf16x2(b.x, b.y), pack_bf16x2(b.z, b.w));
    }
    done = 8 * n8;
  }
  for (int64_t i = done + first; i < n; i += stride) y[i] = bf16_bits_from_float(x[i]);
}

template <bool kVec>
static __global__ void cast_bf16_to_float_kernel(int64_t n, const uint16_t* __restrict__ x,  // (n) bf16 bits
                                                 float* __restrict__ y) {                   // (n)
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (kVec) {
    const int64_t n8 = n / 8;
    for (int64_t i = first; i < n8; i += stride) {
      const uint4 v = reinterpret_cast<const uint4*>(x)[i];
      const uint32_t w[4] = {v.x, v.y, v.z, v.w};
      float f[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        f[2 * j] = float_from_bits(w[j] << 16);
        f[2 * j + 1] = float_from_bits(w[j] & 0xffff0000u);
      }
      reinterpret_cast<float4*>(y)[2 * i] = make_float4(f[0], f[1], f[2], f[3]);
      reinterpret_cast<float4*>(y)[2 * i + 1] = make_float4(f[4], f[5], f[6], f[7]);
    }
    done = 8 * n8;
  }
  for (int64_t i = done + first; i < n; i += stride) y[i] = float_from_bf16_bits(x[i]);
}

void cast_float_to_bf16_cuda(const ExecContext& ctx, int64_t n, const float* x, bf16* y) {
  const char* what = "cast float to bf16";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  CNN_CHECK(n >= 0, "{}: element count must be non-negative, got {}", what, n);
  if (n == 0) return;
  const bool vec = cuda::aligned16(x) && cuda::aligned16(y);
  const unsigned blocks = cuda::grid_blocks(vec ? n / 8 + 1 : n, kThreads);
  auto* out = reinterpret_cast<uint16_t*>(y);
  if (vec)
    cast_float_to_bf16_kernel<true><<<blocks, kThreads, 0, stream>>>(n, x, out);
  else
    cast_float_to_bf16_kernel<false><<<blocks, kThreads, 0, stream>>>(n, x, out);
  CUDA_CHECK_LAUNCH(what);
}

void cast_bf16_to_float_cuda(const ExecContext& ctx, int64_t n, const bf16* x, float* y) {
  const char* what = "cast bf16 to float";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  CNN_CHECK(n >= 0, "{}: element count must be non-negative, got {}", what, n);
  if (n == 0) return;
  const bool vec = cuda::aligned16(x) && cuda::aligned16(y);
  const unsigned blocks = cuda::grid_blocks(vec ? n / 8 + 1 : n, kThreads);
  const auto* in = reinterpret_cast<const uint16_t*>(x);
  if (vec)
    cast_bf16_to_float_kernel<true><<<blocks, kThreads, 0, stream>>>(n, in, y);
  else
    cast_bf16_to_float_kernel<false><<<blocks, kThreads, 0, stream>>>(n, in, y);
  CUDA_CHECK_LAUNCH(what);
}

}  // namespace cnn
