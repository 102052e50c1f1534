// Device code shared by the extra convolution strategies (conv2d_winograd_cuda.cu,
// conv2d_im2col_cuda.cu, conv2d_fft_cuda.cu): cuBLAS status checks, the context's stream and
// handle, one workspace carved into parts, bias add and the deterministic bias gradient.
// Trap: Workspace::get() invalidates the previous pointer, so a call takes ONE block and splits it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "core/error.h"
#include "core/exec_context.h"
#include "ops/reduce.cuh"

namespace cnn::conv2d_strategy_detail {

// Workspace parts are padded to 64 floats (256 bytes) so each part starts aligned for float4 and
// for cuBLAS.
inline size_t round_floats(size_t n) { return (n + 63) / 64 * 64; }

inline void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    CNN_THROW("conv2d cuda: {} failed: {} ({})", what, cublasGetStatusName(status), cublasGetStatusString(status));
}

inline cublasHandle_t blas_handle(const ExecContext& ctx) {
  CNN_CHECK(ctx.cublas_handle, "conv2d cuda: the context has no cuBLAS handle");
  return static_cast<cublasHandle_t>(ctx.cublas_handle);
}

// The context's cuBLAS handle, bound to the context's stream. Trap: cublasSetStream also drops the
// handle's workspace back to cuBLAS's default pool (cuBLAS docs), losing the fixed one CudaContext
// gave it so that no GEMM allocates during CUDA-graph capture; so rebind only when it is elsewhere.
inline cublasHandle_t blas_on_stream(const ExecContext& ctx) {
  const cublasHandle_t blas = blas_handle(ctx);
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  cudaStream_t bound = nullptr;
  check_cublas(cublasGetStream(blas, &bound), "cublasGetStream");
  if (bound != stream) check_cublas(cublasSetStream(blas, stream), "cublasSetStream");
  return blas;
}

// Scratch of `floats` floats from ctx.workspace. Trap: ask for exactly what the strategy's
// workspace_bytes(sh, dir) counts, so the autotuner's workspace filter stays truthful.
inline float* workspace_floats(const ExecContext& ctx, size_t floats, const char* who) {
  if (floats == 0) return nullptr;
  CNN_CHECK(ctx.workspace && ctx.workspace->device() == Device::cuda, "conv2d {}: the context has no CUDA workspace",
            who);
  return ctx.workspace->get(floats);
}

// y (N, K, PQ) += b (K)
static __global__ void conv2d_forward_bias_kernel(float* __restrict__ y, const float* __restrict__ b, int64_t total,
                                                  int64_t PQ, int64_t K) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    y[i] += b[(i / PQ) % K];
}

inline void add_bias(float* y, const float* b, int64_t N, int64_t K, int64_t PQ, cudaStream_t stream) {
  const int64_t total = N * K * PQ;
  conv2d_forward_bias_kernel<<<cuda::grid_blocks(total, 256), 256, 0, stream>>>(y, b, total, PQ, K);
  CUDA_CHECK_LAUNCH("conv2d_forward_bias_kernel");
}

// db (K) = sum over n, pq of dy (N, K, PQ): one block per k, each thread sums a fixed stride of
// (n, pq) in order and the block sum has a fixed tree, so the bits never change between runs.
constexpr int kBiasThreads = 256;
static __global__ void __launch_bounds__(kBiasThreads)
    conv2d_backward_bias_kernel(const float* __restrict__ dy,  // (N, K, PQ)
                                float* __restrict__ db,        // (K)
                                int64_t N, int64_t K, int64_t PQ) {
  __shared__ float part[kBiasThreads / cuda::kWarpSize];
  const int64_t k = blockIdx.x;
  float acc = 0.0f;
  for (int64_t n = 0; n < N; ++n) {
    const float* row = dy + (n * K + k) * PQ;
    for (int64_t i = threadIdx.x; i < PQ; i += kBiasThreads) acc += row[i];
  }
  const float total = cuda::block_sum<kBiasThreads>(acc, part);
  if (threadIdx.x == 0) db[k] = total;
}

inline void bias_grad(const float* dy, float* db, int64_t N, int64_t K, int64_t PQ, cudaStream_t stream) {
  conv2d_backward_bias_kernel<<<static_cast<unsigned>(K), kBiasThreads, 0, stream>>>(dy, db, N, K, PQ);
  CUDA_CHECK_LAUNCH("conv2d_backward_bias_kernel");
}

// Images per chunk so that `per_image` floats of scratch stay under kChunkBytes (at least one).
constexpr size_t kChunkBytes = size_t(256) << 20;
inline int64_t chunk_images(int64_t N, size_t per_image_floats) {
  const size_t cap = kChunkBytes / sizeof(float);
  int64_t nb = per_image_floats == 0 ? N : static_cast<int64_t>(cap / per_image_floats);
  if (nb < 1) nb = 1;
  if (nb > N) nb = N;
  return nb;
}

}  // namespace cnn::conv2d_strategy_detail
