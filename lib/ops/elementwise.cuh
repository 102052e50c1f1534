// Element-wise CUDA loops written once, for the .cu files of lib/ops and lib/optim: a grid-stride
// loop over n elements that takes them four at a time through one 16-byte access when every
// pointer is 16-byte aligned (then the n % 4 tail one by one), the loads, stores and per-lane maps
// of such packs, and the host side that picks the vector or scalar kernel and sizes the grid.
// The element type is a template parameter: a BF16 kernel adds Pack4<__nv_bfloat16> (four BF16 in
// one 8-byte access) and its map4 overloads, and its loops stay the same.
// Trap: the vector body gets the index of a pack (elements 4 i4 .. 4 i4 + 3), the scalar body the
// index of an element; callers that alias outputs with inputs must read a pack before storing it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ops/reduce.cuh"

namespace cnn::cuda {

// Four elements moved by one memory access.
template <typename T>
struct Pack4;
template <>
struct Pack4<float> {
  using type = float4;  // 16 bytes: ld.global.v4.f32
};

template <typename T>
__device__ __forceinline__ typename Pack4<T>::type load4(const T* p, int64_t i4) {
  return reinterpret_cast<const typename Pack4<T>::type*>(p)[i4];
}
template <typename T>
__device__ __forceinline__ void store4(T* p, int64_t i4, typename Pack4<T>::type v) {
  reinterpret_cast<typename Pack4<T>::type*>(p)[i4] = v;
}

// f lane by lane over one, two or three packs, in lane order x, y, z, w.
template <typename F>
__device__ __forceinline__ float4 map4(F&& f, float4 a) {
  return make_float4(f(a.x), f(a.y), f(a.z), f(a.w));
}
template <typename F>
__device__ __forceinline__ float4 map4(F&& f, float4 a, float4 b) {
  return make_float4(f(a.x, b.x), f(a.y, b.y), f(a.z, b.z), f(a.w, b.w));
}
template <typename F>
__device__ __forceinline__ float4 map4(F&& f, float4 a, float4 b, float4 c) {
  return make_float4(f(a.x, b.x, c.x), f(a.y, b.y, c.y), f(a.z, b.z, c.z), f(a.w, b.w, c.w));
}

// The grid-stride loop over n elements: vec4(i4) for every whole pack when kVec, then one(i) for
// the n % 4 tail (for every element when !kVec).
template <bool kVec, typename Vec4, typename One>
__device__ __forceinline__ void for_each_element(int64_t n, Vec4&& vec4, One&& one) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (kVec) {
    const int64_t n4 = n / 4;
    for (int64_t i = first; i < n4; i += stride) vec4(i);
    done = 4 * n4;
  }
  for (int64_t i = done + first; i < n; i += stride) one(i);
}

// Host side: launch(blocks, tag) with tag std::true_type (the vector kernel, blocks sized for n / 4
// packs) when `vec`, else std::false_type (blocks for n elements), kThreads threads a block.
template <int kThreads, typename Launch>
void launch_elementwise(bool vec, int64_t n, Launch&& launch) {
  const unsigned blocks = grid_blocks(vec ? n / 4 : n, kThreads);
  if (vec)
    launch(blocks, std::true_type{});
  else
    launch(blocks, std::false_type{});
}

}  // namespace cnn::cuda
