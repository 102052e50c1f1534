// Element-wise CUDA loops written once, for the .cu files of lib/ops and lib/optim: a grid-stride
// loop over n elements that takes them a pack at a time through one 16-byte access when every
// pointer is 16-byte aligned (then the n % width tail one by one), the loads, stores and per-lane
// maps of such packs, and the host side that picks the vector or scalar kernel and sizes the grid.
// Packs: float4 (load4/map4, four floats), and Lanes<T>, the pack of an element type as floats:
// Lanes<float> is four floats, Lanes<bf16> and Lanes<f16> eight 16-bit values (one uint4) widened
// exactly on load and rounded once on store (half16.cuh's rounding, the CPU emulation's bits). A
// kernel templated on T (float, bf16 or f16) over load_lanes/store_lanes/map_lanes and
// load_one/store_one serves every dtype with one body.
// Trap: the vector body gets the index of a pack (elements width * i .. width * i + width - 1), the
// scalar body the index of an element; callers that alias outputs with inputs must read a pack
// before storing it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/bf16.h"
#include "core/fp16.h"
#include "ops/half16.cuh"
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

// kWidth elements of T moved by one 16-byte access, as floats.
template <typename T>
struct Lanes;
template <>
struct Lanes<float> {
  static constexpr int kWidth = 4;
  float v[4];
};
template <>
struct Lanes<bf16> {
  static constexpr int kWidth = 8;
  float v[8];
};
template <>
struct Lanes<f16> {
  static constexpr int kWidth = 8;
  float v[8];
};

__device__ __forceinline__ Lanes<float> load_lanes(const float* p, int64_t i) {
  const float4 a = load4(p, i);
  return Lanes<float>{{a.x, a.y, a.z, a.w}};
}
__device__ __forceinline__ void store_lanes(float* p, int64_t i, const Lanes<float>& l) {
  store4(p, i, make_float4(l.v[0], l.v[1], l.v[2], l.v[3]));
}
// Word k of the uint4 holds elements 2k (low half) and 2k + 1 (high half).
__device__ __forceinline__ Lanes<bf16> load_lanes(const bf16* p, int64_t i) {
  const uint4 a = reinterpret_cast<const uint4*>(p)[i];
  const uint32_t w[4] = {a.x, a.y, a.z, a.w};
  Lanes<bf16> l;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    l.v[2 * k] = float_from_bits(w[k] << 16);
    l.v[2 * k + 1] = float_from_bits(w[k] & 0xffff0000u);
  }
  return l;
}
__device__ __forceinline__ void store_lanes(bf16* p, int64_t i, const Lanes<bf16>& l) {
  reinterpret_cast<uint4*>(p)[i] = make_uint4(pack_bf16x2(l.v[0], l.v[1]), pack_bf16x2(l.v[2], l.v[3]),
                                              pack_bf16x2(l.v[4], l.v[5]), pack_bf16x2(l.v[6], l.v[7]));
}
__device__ __forceinline__ Lanes<f16> load_lanes(const f16* p, int64_t i) {
  Lanes<f16> l;
  half16_load8(p + 8 * i, l.v);
  return l;
}
__device__ __forceinline__ void store_lanes(f16* p, int64_t i, const Lanes<f16>& l) { half16_store8(p + 8 * i, l.v); }

// One element as a float, and a float stored as one element (bf16: rounded once).
__device__ __forceinline__ float load_one(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_one(const bf16* p, int64_t i) { return to_float(p[i]); }
__device__ __forceinline__ void store_one(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_one(bf16* p, int64_t i, float v) { p[i] = to_bf16(v); }
__device__ __forceinline__ float load_one(const f16* p, int64_t i) { return half16_load(p, i); }
__device__ __forceinline__ void store_one(f16* p, int64_t i, float v) { half16_store(p, i, v); }

// f lane by lane over one or more packs of the same type.
template <typename F, typename L, typename... More>
__device__ __forceinline__ L map_lanes(F&& f, const L& a, const More&... more) {
  L r;
#pragma unroll
  for (int k = 0; k < L::kWidth; ++k) r.v[k] = f(a.v[k], more.v[k]...);
  return r;
}

// The grid-stride loop over n elements: vec(i) for every whole pack of kWidth when kVec, then
// one(i) for the n % kWidth tail (for every element when !kVec).
template <bool kVec, int kWidth = 4, typename Vec, typename One>
__device__ __forceinline__ void for_each_element(int64_t n, Vec&& vec, One&& one) {
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (kVec) {
    const int64_t packs = n / kWidth;
    for (int64_t i = first; i < packs; i += stride) vec(i);
    done = kWidth * packs;
  }
  for (int64_t i = done + first; i < n; i += stride) one(i);
}

// Host side: launch(blocks, tag) with tag std::true_type (the vector kernel, blocks sized for
// n / kWidth packs) when `vec`, else std::false_type (blocks for n elements), kThreads threads a block.
template <int kThreads, int kWidth = 4, typename Launch>
void launch_elementwise(bool vec, int64_t n, Launch&& launch) {
  const unsigned blocks = grid_blocks(vec ? n / kWidth : n, kThreads);
  if (vec)
    launch(blocks, std::true_type{});
  else
    launch(blocks, std::false_type{});
}

}  // namespace cnn::cuda
