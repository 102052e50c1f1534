// Gradient norm, clipping and the finiteness check on the GPU. The norm is the CPU's definition
// on the device: one double partial per kGradNormChunk elements (one block per chunk, fixed
// tree), then one block adds the partials in a fixed order; no atomics, so it repeats bit for bit.
// Trap: clipping decides on the device (the scale kernel reads the norm there), so the async
// variant needs no host round trip; the synchronous wrappers copy the norm back at the end.
#include <cmath>

#include "core/cuda_check.h"
#include "ops/elementwise.cuh"
#include "optim/clip.h"

namespace cnn {

static constexpr int kThreads = 256;

// Block b sums the squares of chunk b (and b + gridDim.x, ...) of kGradNormChunk elements.
static __global__ void grad_norm_forward_chunk_kernel(int64_t n,
                                                      const float* __restrict__ grads,  // (n)
                                                      double* __restrict__ partial) {   // (chunks)
  __shared__ double shared[kThreads / cuda::kWarpSize];
  const int64_t chunks = (n + kGradNormChunk - 1) / kGradNormChunk;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const int64_t begin = c * kGradNormChunk, end = min(n, begin + kGradNormChunk);
    double sum = 0.0;
    for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
      const double g = grads[i];
      sum += g * g;
    }
    sum = cuda::block_sum<kThreads>(sum, shared);
    if (threadIdx.x == 0) partial[c] = sum;
  }
}

// One block: norm = sqrt(sum of partials), each thread adding a fixed strided subset in order.
static __global__ void grad_norm_forward_finish_kernel(int64_t chunks,
                                                       const double* __restrict__ partial,  // (chunks)
                                                       double* __restrict__ norm) {         // scalar
  __shared__ double shared[kThreads / cuda::kWarpSize];
  double sum = 0.0;
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) sum += partial[c];
  sum = cuda::block_sum<kThreads>(sum, shared);
  if (threadIdx.x == 0) *norm = sqrt(sum);
}

// grads *= max_norm / (norm + 1e-6) when norm > max_norm and finite (torch's clip_grad_norm_).
template <bool kVec>
static __global__ void clip_grad_norm_scale_kernel(int64_t n, double max_norm,
                                                   const double* __restrict__ norm,  // scalar
                                                   float* __restrict__ grads) {      // (n)
  const double total = *norm;
  if (!(total > max_norm) || !isfinite(total)) return;
  const float scale = static_cast<float>(max_norm / (total + 1e-6));
  auto scaled = [scale](float g) { return g * scale; };
  cuda::for_each_element<kVec>(
      n, [&](int64_t i) { cuda::store4(grads, i, cuda::map4(scaled, cuda::load4(grads, i))); },
      [&](int64_t i) { grads[i] *= scale; });
}

// Sets *bad to 1 when any element is NaN or infinite (every writer stores the same value).
static __global__ void all_finite_forward_scan_kernel(int64_t n,
                                                      const float* __restrict__ x,  // (n)
                                                      int* __restrict__ bad) {      // scalar, zeroed
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool finite = true;
  for (int64_t i = first; i < n; i += stride) finite = finite && isfinite(x[i]);
  if (__syncthreads_or(!finite) && threadIdx.x == 0) *bad = 1;
}

// Queues the norm of grads into the device scalar `norm`, with partials in the workspace.
static void launch_norm(const ExecContext& ctx, cudaStream_t stream, const float* grads, int64_t n, double* norm,
                        double* partial) {
  const int64_t chunks = (n + kGradNormChunk - 1) / kGradNormChunk;
  if (chunks > 0) {
    grad_norm_forward_chunk_kernel<<<cuda::grid_blocks(chunks, 1), kThreads, 0, stream>>>(n, grads, partial);
    CUDA_CHECK_LAUNCH("global_grad_norm (chunks)");
  }
  grad_norm_forward_finish_kernel<<<1, kThreads, 0, stream>>>(chunks, partial, norm);
  CUDA_CHECK_LAUNCH("global_grad_norm (finish)");
}

static void launch_scale(cudaStream_t stream, float* grads, int64_t n, double max_norm, const double* norm) {
  if (n == 0) return;
  cuda::launch_elementwise<kThreads>(cuda::aligned16(grads), n, [&](unsigned blocks, auto vec) {
    clip_grad_norm_scale_kernel<decltype(vec)::value><<<blocks, kThreads, 0, stream>>>(n, max_norm, norm, grads);
  });
  CUDA_CHECK_LAUNCH("clip_grad_norm (scale)");
}

// Workspace: [0] the norm, then one partial per chunk.
static double* norm_scratch(const ExecContext& ctx, int64_t n, const char* what) {
  const int64_t chunks = (n + kGradNormChunk - 1) / kGradNormChunk;
  return static_cast<double*>(cuda::workspace_bytes(ctx, static_cast<size_t>(chunks + 1) * sizeof(double), what));
}

static double fetch(cudaStream_t stream, const double* dev) {
  double host = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&host, dev, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

double global_grad_norm_cuda(const ExecContext& ctx, const float* grads, int64_t n) {
  const char* what = "global_grad_norm";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  double* scratch = norm_scratch(ctx, n, what);
  launch_norm(ctx, stream, grads, n, scratch, scratch + 1);
  return fetch(stream, scratch);
}

double clip_grad_norm_cuda(const ExecContext& ctx, float* grads, int64_t n, double max_norm) {
  const char* what = "clip_grad_norm";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  CNN_CHECK(max_norm > 0.0, "{}: max_norm must be > 0, got {}", what, max_norm);
  double* scratch = norm_scratch(ctx, n, what);
  launch_norm(ctx, stream, grads, n, scratch, scratch + 1);
  launch_scale(stream, grads, n, max_norm, scratch);
  return fetch(stream, scratch);
}

void clip_grad_norm_cuda_async(const ExecContext& ctx, float* grads, int64_t n, double max_norm, double* norm) {
  const char* what = "clip_grad_norm (async)";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  CNN_CHECK(max_norm > 0.0, "{}: max_norm must be > 0, got {}", what, max_norm);
  CNN_CHECK(n >= 0 && (n == 0 || grads != nullptr) && norm != nullptr, "{}: bad buffers ({} elements)", what, n);
  double* scratch = norm_scratch(ctx, n, what);
  launch_norm(ctx, stream, grads, n, norm, scratch + 1);
  launch_scale(stream, grads, n, max_norm, norm);
}

bool all_finite_cuda(const ExecContext& ctx, const float* x, int64_t n) {
  const char* what = "all_finite";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  if (n == 0) return true;
  int* bad = static_cast<int*>(cuda::workspace_bytes(ctx, sizeof(int), what));
  CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), stream));
  all_finite_forward_scan_kernel<<<cuda::grid_blocks(n, kThreads), kThreads, 0, stream>>>(n, x, bad);
  CUDA_CHECK_LAUNCH(what);
  int host = 0;
  CUDA_CHECK(cudaMemcpyAsync(&host, bad, sizeof(int), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return host == 0;
}

}  // namespace cnn
