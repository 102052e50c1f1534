// Pointwise activations on the GPU: one kernel instance per kind, so the switch of
// activation_math.h folds away; float4 accesses when every pointer read or written is 16-byte
// aligned (the n % 4 tail goes element by element), plain float accesses otherwise
// (elementwise.cuh's loop).
// Trap: y may alias x and dx may alias dy, so nothing is __restrict__; each thread reads its
// elements before writing them, and backward loads only the operands its kind needs (x or y may be null).
#include "core/cuda_check.h"
#include "ops/activation.h"
#include "ops/activation_math.h"
#include "ops/elementwise.cuh"

namespace cnn {

static constexpr int kThreads = 256;

template <ActivationKind K>
constexpr bool backward_reads_x() {
  return K == ActivationKind::relu || K == ActivationKind::leaky_relu || K == ActivationKind::elu;
}
template <ActivationKind K>
constexpr bool backward_reads_y() {
  return K == ActivationKind::elu || K == ActivationKind::sigmoid || K == ActivationKind::tanh;
}

template <ActivationKind K>
__device__ __forceinline__ float backward_one(float alpha, const float* x, const float* y, const float* dy, int64_t i) {
  const float xv = backward_reads_x<K>() ? x[i] : 0.0f;
  const float yv = backward_reads_y<K>() ? y[i] : 0.0f;
  return activation_backward_value(K, alpha, xv, yv, dy[i]);
}

template <ActivationKind K, bool kVec>
static __global__ void activation_forward_pointwise_kernel(int64_t n, float alpha,
                                                           const float* x,  // (n)
                                                           float* y) {      // (n)
  auto f = [alpha](float v) { return activation_forward_value(K, alpha, v); };
  cuda::for_each_element<kVec>(
      n, [&](int64_t i) { cuda::store4(y, i, cuda::map4(f, cuda::load4(x, i))); }, [&](int64_t i) { y[i] = f(x[i]); });
}

template <ActivationKind K, bool kVec>
static __global__ void activation_backward_pointwise_kernel(int64_t n, float alpha,
                                                            const float* x,   // (n) or null when K ignores it
                                                            const float* y,   // (n) or null when K ignores it
                                                            const float* dy,  // (n)
                                                            float* dx) {      // (n)
  auto vec4 = [&](int64_t i) {
    const float4 g = cuda::load4(dy, i);
    float4 xv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), yv = xv;
    if (backward_reads_x<K>()) xv = cuda::load4(x, i);
    if (backward_reads_y<K>()) yv = cuda::load4(y, i);
    auto f = [alpha](float xe, float ye, float ge) { return activation_backward_value(K, alpha, xe, ye, ge); };
    cuda::store4(dx, i, cuda::map4(f, xv, yv, g));
  };
  cuda::for_each_element<kVec>(n, vec4, [&](int64_t i) { dx[i] = backward_one<K>(alpha, x, y, dy, i); });
}

// dx = act'(y) dy from the output alone (activation_fusable kinds); dx may alias dy. Scalar loads.
template <ActivationKind K>
static __global__ void activation_backward_from_output_kernel(int64_t n, float alpha,
                                                              const float* y,   // (n)
                                                              const float* dy,  // (n)
                                                              float* dx) {      // (n)
  cuda::for_each_element<false>(
      n, [](int64_t) {}, [&](int64_t i) { dx[i] = activation_backward_from_output(K, alpha, y[i], dy[i]); });
}

template <ActivationKind K>
static void launch_forward(cudaStream_t stream, int64_t n, float alpha, const float* x, float* y) {
  cuda::launch_elementwise<kThreads>(cuda::aligned16(x) && cuda::aligned16(y), n, [&](unsigned blocks, auto vec) {
    activation_forward_pointwise_kernel<K, decltype(vec)::value><<<blocks, kThreads, 0, stream>>>(n, alpha, x, y);
  });
  CUDA_CHECK_LAUNCH("activation forward");
}

template <ActivationKind K>
static void launch_backward(cudaStream_t stream, int64_t n, float alpha, const float* x, const float* y,
                            const float* dy, float* dx) {
  const bool vec = (!backward_reads_x<K>() || cuda::aligned16(x)) && (!backward_reads_y<K>() || cuda::aligned16(y)) &&
                   cuda::aligned16(dy) && cuda::aligned16(dx);
  cuda::launch_elementwise<kThreads>(vec, n, [&](unsigned blocks, auto v) {
    activation_backward_pointwise_kernel<K, decltype(v)::value>
        <<<blocks, kThreads, 0, stream>>>(n, alpha, x, y, dy, dx);
  });
  CUDA_CHECK_LAUNCH("activation backward");
}

static void check_count(const char* what, int64_t n) {
  if (n < 0) CNN_THROW("{}: element count must be non-negative, got {}", what, n);
}

void activation_forward_cuda(const ActivationForward& args) {
  const ActivationParams& p = args.p;
  const int64_t n = args.n;
  const float* x = args.x.f32();
  float* y = args.y.f32();
  cudaStream_t stream = cuda::stream_of(*args.ctx, "activation forward");
  check_count("activation forward", n);
  if (n == 0) return;
  switch (p.kind) {
    case ActivationKind::relu:
      return launch_forward<ActivationKind::relu>(stream, n, p.alpha, x, y);
    case ActivationKind::leaky_relu:
      return launch_forward<ActivationKind::leaky_relu>(stream, n, p.alpha, x, y);
    case ActivationKind::elu:
      return launch_forward<ActivationKind::elu>(stream, n, p.alpha, x, y);
    case ActivationKind::sigmoid:
      return launch_forward<ActivationKind::sigmoid>(stream, n, p.alpha, x, y);
    case ActivationKind::tanh:
      return launch_forward<ActivationKind::tanh>(stream, n, p.alpha, x, y);
  }
  CNN_THROW("activation forward: unknown kind {}", static_cast<int>(p.kind));
}

void activation_backward_cuda(const ActivationBackward& args) {
  const ActivationParams& p = args.p;
  const int64_t n = args.n;
  const float *x = args.x.f32(), *y = args.y.f32(), *dy = args.dy.f32();
  float* dx = args.dx.f32();
  cudaStream_t stream = cuda::stream_of(*args.ctx, "activation backward");
  check_count("activation backward", n);
  if (n == 0) return;
  const float a = p.alpha;
  switch (p.kind) {
    case ActivationKind::relu:
      return launch_backward<ActivationKind::relu>(stream, n, a, x, y, dy, dx);
    case ActivationKind::leaky_relu:
      return launch_backward<ActivationKind::leaky_relu>(stream, n, a, x, y, dy, dx);
    case ActivationKind::elu:
      return launch_backward<ActivationKind::elu>(stream, n, a, x, y, dy, dx);
    case ActivationKind::sigmoid:
      return launch_backward<ActivationKind::sigmoid>(stream, n, a, x, y, dy, dx);
    case ActivationKind::tanh:
      return launch_backward<ActivationKind::tanh>(stream, n, a, x, y, dy, dx);
  }
  CNN_THROW("activation backward: unknown kind {}", static_cast<int>(p.kind));
}

void activation_backward_from_output_cuda(const ActivationBackwardFromOutput& args) {
  const char* what = "activation backward from the output";
  const ActivationParams& p = args.p;
  const int64_t n = args.n;
  const float *y = args.y.f32(), *dy = args.dy.f32();
  float* dx = args.dx.f32();
  cudaStream_t stream = cuda::stream_of(*args.ctx, what);
  check_count(what, n);
  if (!activation_fusable(p)) CNN_THROW("{}: {} with alpha {} needs its input", what, to_string(p.kind), p.alpha);
  if (n == 0) return;
  const unsigned blocks = cuda::grid_blocks(n, kThreads);
  const float a = p.alpha;
  switch (p.kind) {
    case ActivationKind::relu:
      activation_backward_from_output_kernel<ActivationKind::relu><<<blocks, kThreads, 0, stream>>>(n, a, y, dy, dx);
      break;
    case ActivationKind::leaky_relu:
      activation_backward_from_output_kernel<ActivationKind::leaky_relu>
          <<<blocks, kThreads, 0, stream>>>(n, a, y, dy, dx);
      break;
    case ActivationKind::elu:
      activation_backward_from_output_kernel<ActivationKind::elu><<<blocks, kThreads, 0, stream>>>(n, a, y, dy, dx);
      break;
    case ActivationKind::sigmoid:
      activation_backward_from_output_kernel<ActivationKind::sigmoid>
          <<<blocks, kThreads, 0, stream>>>(n, a, y, dy, dx);
      break;
    case ActivationKind::tanh:
      activation_backward_from_output_kernel<ActivationKind::tanh><<<blocks, kThreads, 0, stream>>>(n, a, y, dy, dx);
      break;
  }
  CUDA_CHECK_LAUNCH("activation backward from the output");
}

}  // namespace cnn
