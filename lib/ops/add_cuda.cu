// Element-wise sum of up to 64 tensors on the GPU: the input pointers travel by value in the
// kernel's parameters, the sum runs left to right in float like the CPU (bitwise equal), float4
// when every pointer is 16-byte aligned with a scalar tail (elementwise.cuh's loop). Backward writes dy to every gradient
// in one pass, reading dy once.
// Trap: y may alias any input: each thread reads all of its elements before writing them.
#include <vector>

#include "core/cuda_check.h"
#include "ops/add.h"
#include "ops/elementwise.cuh"

namespace cnn {

static constexpr int kThreads = 256;
static constexpr int kMaxInputs = 64;

struct AddInputs {
  const float* x[kMaxInputs];
};
struct AddOutputs {
  float* dx[kMaxInputs];
};

template <bool kVec>
static __global__ void add_forward_pointwise_kernel(int64_t n, int count,
                                                    const __grid_constant__ AddInputs in,  // count x (n)
                                                    float* y) {                            // (n)
  auto plus = [](float a, float b) { return a + b; };
  auto vec4 = [&](int64_t i) {
    float4 acc = cuda::load4(in.x[0], i);
    for (int k = 1; k < count; ++k) acc = cuda::map4(plus, acc, cuda::load4(in.x[k], i));
    cuda::store4(y, i, acc);
  };
  cuda::for_each_element<kVec>(n, vec4, [&](int64_t i) {
    float acc = in.x[0][i];
    for (int k = 1; k < count; ++k) acc += in.x[k][i];
    y[i] = acc;
  });
}

template <bool kVec>
static __global__ void add_backward_broadcast_kernel(int64_t n, int count,
                                                     const float* __restrict__ dy,              // (n)
                                                     const __grid_constant__ AddOutputs out) {  // count x (n)
  auto vec4 = [&](int64_t i) {
    const float4 g = cuda::load4(dy, i);
    for (int k = 0; k < count; ++k) cuda::store4(out.dx[k], i, g);
  };
  cuda::for_each_element<kVec>(n, vec4, [&](int64_t i) {
    const float g = dy[i];
    for (int k = 0; k < count; ++k) out.dx[k][i] = g;
  });
}

// The context's stream, after checking the counts of a (AddForward or AddBackward).
template <typename Args>
static cudaStream_t stream_for(const Args& a, const char* what) {
  cudaStream_t stream = cuda::stream_of(*a.ctx, what);
  if (a.n < 0) CNN_THROW("{}: element count must be non-negative, got {}", what, a.n);
  if (a.count < 1) CNN_THROW("{}: needs at least one input, got {}", what, a.count);
  if (a.count > kMaxInputs)
    CNN_THROW("{}: the CUDA kernel takes at most {} inputs, got {}", what, kMaxInputs, a.count);
  return stream;
}

void add_forward_cuda(const AddForward& a) {
  const char* what = "add forward";
  cudaStream_t stream = stream_for(a, what);
  const int64_t n = a.n;
  const int count = a.count;
  const std::vector<const float*> xs = f32_pointers(a.xs, size_t(count));
  float* y = a.y.f32();
  if (n == 0) return;
  if (count == 1) {
    if (xs[0] != y)
      CUDA_CHECK(cudaMemcpyAsync(y, xs[0], static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  AddInputs in{};
  bool vec = cuda::aligned16(y);
  for (int k = 0; k < count; ++k) {
    in.x[k] = xs[k];
    vec = vec && cuda::aligned16(xs[k]);
  }
  cuda::launch_elementwise<kThreads>(vec, n, [&](unsigned blocks, auto v) {
    add_forward_pointwise_kernel<decltype(v)::value><<<blocks, kThreads, 0, stream>>>(n, count, in, y);
  });
  CUDA_CHECK_LAUNCH(what);
}

void add_backward_cuda(const AddBackward& a) {
  const char* what = "add backward";
  cudaStream_t stream = stream_for(a, what);
  const int64_t n = a.n;
  const int count = a.count;
  const float* dy = a.dy.f32();
  const std::vector<float*> dxs = f32_pointers(a.dxs, size_t(count));
  if (n == 0) return;
  AddOutputs out{};
  int targets = 0;
  bool vec = cuda::aligned16(dy);
  for (int k = 0; k < count; ++k) {
    if (!dxs[k] || dxs[k] == dy) continue;  // no gradient wanted, or it already is dy
    out.dx[targets++] = dxs[k];
    vec = vec && cuda::aligned16(dxs[k]);
  }
  if (targets == 0) return;
  cuda::launch_elementwise<kThreads>(vec, n, [&](unsigned blocks, auto v) {
    add_backward_broadcast_kernel<decltype(v)::value><<<blocks, kThreads, 0, stream>>>(n, targets, dy, out);
  });
  CUDA_CHECK_LAUNCH(what);
}

}  // namespace cnn
