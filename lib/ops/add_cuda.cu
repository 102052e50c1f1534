// Element-wise sum of up to 64 tensors on the GPU: the input pointers travel by value in the
// kernel's parameters, the sum runs left to right in float like the CPU (bitwise equal), in
// 16-byte packs when every pointer is 16-byte aligned with a scalar tail (elementwise.cuh's loop).
// Backward writes dy to every gradient in one pass, reading dy once. T is float, bf16 or f16 (BF16 /
// FP16 training: the float sum of the widened inputs is rounded once; the layout does not matter).
// Trap: y may alias any input: each thread reads all of its elements before writing them.
#include <vector>

#include "core/cuda_check.h"
#include "ops/add.h"
#include "ops/elementwise.cuh"

namespace cnn {

static constexpr int kThreads = 256;
static constexpr int kMaxInputs = 64;

template <typename T>
struct AddInputs {
  const T* x[kMaxInputs];
};
template <typename T>
struct AddOutputs {
  T* dx[kMaxInputs];
};

template <typename T, bool kVec>
static __global__ void add_forward_pointwise_kernel(int64_t n, int count,
                                                    const __grid_constant__ AddInputs<T> in,  // count x (n)
                                                    T* y) {                                   // (n)
  auto plus = [](float a, float b) { return a + b; };
  auto vec = [&](int64_t i) {
    cuda::Lanes<T> acc = cuda::load_lanes(in.x[0], i);
    for (int k = 1; k < count; ++k) acc = cuda::map_lanes(plus, acc, cuda::load_lanes(in.x[k], i));
    cuda::store_lanes(y, i, acc);
  };
  cuda::for_each_element<kVec, cuda::Lanes<T>::kWidth>(n, vec, [&](int64_t i) {
    float acc = cuda::load_one(in.x[0], i);
    for (int k = 1; k < count; ++k) acc += cuda::load_one(in.x[k], i);
    cuda::store_one(y, i, acc);
  });
}

// A copy: the bits move unchanged (no widening).
template <typename T, bool kVec>
static __global__ void add_backward_broadcast_kernel(int64_t n, int count,
                                                     const T* __restrict__ dy,                     // (n)
                                                     const __grid_constant__ AddOutputs<T> out) {  // count x (n)
  auto vec = [&](int64_t i) {
    const float4 g = cuda::load4(reinterpret_cast<const float*>(dy), i);
    for (int k = 0; k < count; ++k) cuda::store4(reinterpret_cast<float*>(out.dx[k]), i, g);
  };
  cuda::for_each_element<kVec, cuda::Lanes<T>::kWidth>(n, vec, [&](int64_t i) {
    const T g = dy[i];
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

template <typename T>
static void add_forward(const AddForward& a, cudaStream_t stream, const std::vector<const T*>& xs, T* y) {
  const int64_t n = a.n;
  const int count = a.count;
  if (n == 0) return;
  if (count == 1) {
    if (xs[0] != y)
      CUDA_CHECK(cudaMemcpyAsync(y, xs[0], static_cast<size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  AddInputs<T> in{};
  bool vec = cuda::aligned16(y);
  for (int k = 0; k < count; ++k) {
    in.x[k] = xs[k];
    vec = vec && cuda::aligned16(xs[k]);
  }
  cuda::launch_elementwise<kThreads, cuda::Lanes<T>::kWidth>(vec, n, [&](unsigned blocks, auto v) {
    add_forward_pointwise_kernel<T, decltype(v)::value><<<blocks, kThreads, 0, stream>>>(n, count, in, y);
  });
  CUDA_CHECK_LAUNCH("add forward");
}

template <typename T>
static void add_backward(const AddBackward& a, cudaStream_t stream, const T* dy, const std::vector<T*>& dxs) {
  const int64_t n = a.n;
  const int count = a.count;
  if (n == 0) return;
  AddOutputs<T> out{};
  int targets = 0;
  bool vec = cuda::aligned16(dy);
  for (int k = 0; k < count; ++k) {
    if (!dxs[k] || dxs[k] == dy) continue;  // no gradient wanted, or it already is dy
    out.dx[targets++] = dxs[k];
    vec = vec && cuda::aligned16(dxs[k]);
  }
  if (targets == 0) return;
  cuda::launch_elementwise<kThreads, cuda::Lanes<T>::kWidth>(vec, n, [&](unsigned blocks, auto v) {
    add_backward_broadcast_kernel<T, decltype(v)::value><<<blocks, kThreads, 0, stream>>>(n, targets, dy, out);
  });
  CUDA_CHECK_LAUNCH("add backward");
}

void add_forward_cuda(const AddForward& a) {
  cudaStream_t stream = stream_for(a, "add forward");
  add_forward(a, stream, f32_pointers(a.xs, size_t(a.count)), a.y.f32());
}
template <typename T>
static void add_forward_16(const AddForward& a) {
  cudaStream_t stream = stream_for(a, "add forward");
  add_forward(a, stream, half16_pointers<T>(a.xs, size_t(a.count)), half16_data<T>(a.y));
}
void add_forward_cuda_bf16(const AddForward& a) { add_forward_16<bf16>(a); }
void add_forward_cuda_f16(const AddForward& a) { add_forward_16<f16>(a); }
void add_backward_cuda(const AddBackward& a) {
  cudaStream_t stream = stream_for(a, "add backward");
  add_backward(a, stream, a.dy.f32(), f32_pointers(a.dxs, size_t(a.count)));
}
template <typename T>
static void add_backward_16(const AddBackward& a) {
  cudaStream_t stream = stream_for(a, "add backward");
  add_backward(a, stream, half16_data<T>(a.dy), half16_pointers<T>(a.dxs, size_t(a.count)));
}
void add_backward_cuda_bf16(const AddBackward& a) { add_backward_16<bf16>(a); }
void add_backward_cuda_f16(const AddBackward& a) { add_backward_16<f16>(a); }

}  // namespace cnn
