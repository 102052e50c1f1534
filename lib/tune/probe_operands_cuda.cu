// The probe operands' kernels (see probe_operands.h): the host's (seed, index) -> value function
// on the device, and relative L2 sums in the host's chunks, one block a chunk (fixed tree, no
// atomics: the same sums on every run). Trap: only the chunk partials come back to the host.
#include <cuda_runtime.h>

#include <vector>

#include "core/cuda_check.h"
#include "ops/convert.h"
#include "ops/reduce.cuh"
#include "tune/probe_operands.h"

namespace cnn {

static constexpr int kThreads = 256;

// out[i] (n, in dtype) = f's value i; one thread a pair of values.
static __global__ void probe_fill_forward_kernel(int64_t n, int64_t inner, int64_t channels, ProbeFill f,
                                                 DType dtype,
                                                 void* __restrict__ out) {  // (n)
  const int64_t pairs = (n + 1) / 2;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < pairs; j += stride) {
    float v0, v1;
    probe_pair(f, static_cast<uint64_t>(j), v0, v1);
    store_from_float(out, dtype, 2 * j, probe_finish(f, 2 * j, inner, channels, v0));
    if (2 * j + 1 < n) store_from_float(out, dtype, 2 * j + 1, probe_finish(f, 2 * j + 1, inner, channels, v1));
  }
}

// partial[c] = sum of (got - ref)^2 and partial[chunks + c] = sum of ref^2 over chunk c.
static __global__ void probe_l2_forward_chunk_kernel(int64_t n,
                                                     const float* __restrict__ got,  // (n)
                                                     const float* __restrict__ ref,  // (n)
                                                     double* __restrict__ partial) {  // (2 * chunks)
  __shared__ double shared[kThreads / cuda::kWarpSize];
  const int64_t chunks = (n + kRelativeL2Chunk - 1) / kRelativeL2Chunk;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int64_t begin = c * kRelativeL2Chunk, end = min(n, begin + kRelativeL2Chunk);
    double diff = 0.0, norm = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
      const double d = static_cast<double>(got[i]) - static_cast<double>(ref[i]);
      diff += d * d;
      norm += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
    }
    diff = cuda::block_sum<kThreads>(diff, shared);
    norm = cuda::block_sum<kThreads>(norm, shared);
    if (threadIdx.x == 0) partial[c] = diff, partial[chunks + c] = norm;
  }
}

void probe_fill_cuda(const ExecContext& ctx, void* out, DType dtype, int64_t n, int64_t inner, int64_t channels,
                     const ProbeFill& f) {
  const char* what = "probe operand fill";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  if (n <= 0) return;
  probe_fill_forward_kernel<<<cuda::grid_blocks((n + 1) / 2, kThreads), kThreads, 0, stream>>>(n, inner, channels, f,
                                                                                               dtype, out);
  CUDA_CHECK_LAUNCH(what);
}

L2Sums l2_sums_cuda(const ExecContext& ctx, const float* got, const float* ref, int64_t n) {
  const char* what = "probe relative L2";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  const int64_t chunks = (n + kRelativeL2Chunk - 1) / kRelativeL2Chunk;
  L2Sums s;
  if (chunks == 0) return s;
  Tensor partial = Tensor::empty(Shape{4 * chunks}, Device::cuda, "probe relative L2 partials");  // 2 * chunks doubles
  double* dev = static_cast<double*>(partial.raw());
  probe_l2_forward_chunk_kernel<<<cuda::grid_blocks(chunks, 1), kThreads, 0, stream>>>(n, got, ref, dev);
  CUDA_CHECK_LAUNCH(what);
  std::vector<double> host(static_cast<size_t>(2 * chunks));
  CUDA_CHECK(cudaMemcpyAsync(host.data(), dev, host.size() * sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int64_t c = 0; c < chunks; ++c) s.diff += host[size_t(c)], s.norm += host[size_t(chunks + c)];
  return s;
}

void probe_poison_cuda(const ExecContext& ctx, void* p, size_t bytes) {
  cudaStream_t stream = cuda::stream_of(ctx, "probe poison");
  if (bytes > 0) CUDA_CHECK(cudaMemsetAsync(p, 0xFF, bytes, stream));
}

}  // namespace cnn
