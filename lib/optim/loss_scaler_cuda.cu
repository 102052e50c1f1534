// Dynamic loss scaling on the GPU (loss_scaler.h): multiply by the scale, check and unscale the
// gradients, then one thread advances the state; every value is read from device memory, so the
// three are captured once in a CUDA graph and replayed every step.
// Trap: the check's flag is written by every block that saw a non-finite value, all writing the
// same 1 (no atomics, no order dependence); it is zeroed on the stream before the scan.
#include "core/cuda_check.h"
#include "ops/elementwise.cuh"
#include "optim/loss_scaler.h"

namespace cnn {

static constexpr int kThreads = 256;

template <bool kVec>
static __global__ void loss_scale_multiply_kernel(int64_t n, const LossScaleState* __restrict__ state,  // scalar
                                                  float* __restrict__ x) {                              // (n)
  const float scale = state->scale;
  auto scaled = [scale](float v) { return v * scale; };
  cuda::for_each_element<kVec>(
      n, [&](int64_t i) { cuda::store4(x, i, cuda::map4(scaled, cuda::load4(x, i))); },
      [&](int64_t i) { x[i] *= scale; });
}

// grads /= scale (a power of two: exact), and found_inf = 1 when any element is NaN or infinite.
template <bool kVec>
static __global__ void loss_scale_unscale_kernel(int64_t n, LossScaleState* __restrict__ state,  // scalar
                                                 float* __restrict__ grads) {                    // (n)
  const float inv = 1.0f / state->scale;
  bool finite = true;
  auto unscaled = [&finite, inv](float g) {
    finite = finite && isfinite(g);
    return g * inv;
  };
  cuda::for_each_element<kVec>(
      n, [&](int64_t i) { cuda::store4(grads, i, cuda::map4(unscaled, cuda::load4(grads, i))); },
      [&](int64_t i) { grads[i] = unscaled(grads[i]); });
  if (__syncthreads_or(!finite) && threadIdx.x == 0) state->found_inf = 1;
}

static __global__ void loss_scale_advance_kernel(LossScaleState* __restrict__ state,  // scalar
                                                 int64_t growth_interval,
                                                 const float* __restrict__ loss) {    // scalar or null
  advance_loss_scale(*state, growth_interval, loss == nullptr || isfinite(*loss));
}

void loss_scale_multiply_cuda(const ExecContext& ctx, float* x, int64_t n, const LossScaleState* state) {
  cudaStream_t stream = cuda::stream_of(ctx, "loss scale (multiply)");
  if (n == 0) return;
  cuda::launch_elementwise<kThreads>(cuda::aligned16(x), n, [&](unsigned blocks, auto vec) {
    loss_scale_multiply_kernel<decltype(vec)::value><<<blocks, kThreads, 0, stream>>>(n, state, x);
  });
  CUDA_CHECK_LAUNCH("loss scale (multiply)");
}

void loss_scale_unscale_cuda(const ExecContext& ctx, float* grads, int64_t n, LossScaleState* state,
                             int64_t growth_interval, const float* loss) {
  cudaStream_t stream = cuda::stream_of(ctx, "loss scale (unscale)");
  CUDA_CHECK(cudaMemsetAsync(&state->found_inf, 0, sizeof(state->found_inf), stream));
  if (n > 0) {
    cuda::launch_elementwise<kThreads>(cuda::aligned16(grads), n, [&](unsigned blocks, auto vec) {
      loss_scale_unscale_kernel<decltype(vec)::value><<<blocks, kThreads, 0, stream>>>(n, state, grads);
    });
    CUDA_CHECK_LAUNCH("loss scale (unscale)");
  }
  loss_scale_advance_kernel<<<1, 1, 0, stream>>>(state, growth_interval, loss);
  CUDA_CHECK_LAUNCH("loss scale (advance)");
}

void loss_scale_copy_cuda(const ExecContext& ctx, void* dst, const void* src, bool to_host) {
  cudaStream_t stream = cuda::stream_of(ctx, "loss scale (copy)");
  CUDA_CHECK(cudaMemcpyAsync(dst, src, sizeof(LossScaleState), to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice,
                             stream));
  // A write from a host stack value must finish before the caller's value goes away.
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

}  // namespace cnn
