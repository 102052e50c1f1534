// Gradient-bucket kernels (see bucket_math.h): grid-stride elementwise loops, queued on the
// caller's stream (the NCCL communicator's own stream), never synchronising.
#include <cuda_runtime.h>

#include <algorithm>

#include "core/cuda_check.h"
#include "dist/bucket_math.h"

namespace cnn {

static constexpr int kThreads = 256;

static __global__ void bucket_scale_kernel(int64_t n, float factor, float* __restrict__ x) {  // x (n)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] *= factor;
}

static __global__ void bucket_divide_kernel(int64_t n, float divisor, float* __restrict__ x) {  // x (n)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] /= divisor;
}

static __global__ void bucket_pack_bf16_kernel(int64_t n, const float* __restrict__ x,  // (n)
                                               uint16_t* __restrict__ y) {              // (n)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = float_to_bf16(x[i]);
}

static __global__ void bucket_unpack_bf16_divide_kernel(int64_t n, float divisor,
                                                        const uint16_t* __restrict__ x,  // (n)
                                                        float* __restrict__ y) {         // (n)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = bf16_to_float(x[i]) / divisor;
}

static unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)));
}

void scale_buffer_cuda(void* stream, float* x, int64_t n, float factor) {
  if (n <= 0) return;
  bucket_scale_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(n, factor, x);
  CUDA_CHECK_LAUNCH("bucket_scale_kernel");
}

void divide_buffer_cuda(void* stream, float* x, int64_t n, float divisor) {
  if (n <= 0) return;
  bucket_divide_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(n, divisor, x);
  CUDA_CHECK_LAUNCH("bucket_divide_kernel");
}

void pack_bf16_cuda(void* stream, const float* x, uint16_t* y, int64_t n) {
  if (n <= 0) return;
  bucket_pack_bf16_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(n, x, y);
  CUDA_CHECK_LAUNCH("bucket_pack_bf16_kernel");
}

void unpack_bf16_divide_cuda(void* stream, const uint16_t* x, float* y, int64_t n, float divisor) {
  if (n <= 0) return;
  bucket_unpack_bf16_divide_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(n, divisor, x, y);
  CUDA_CHECK_LAUNCH("bucket_unpack_bf16_divide_kernel");
}

}  // namespace cnn
