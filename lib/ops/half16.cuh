// The two 16-bit activation types of the reduced-precision rows, bf16 and f16, as device traits of
// their storage type (core/bf16.h, core/fp16.h), so one kernel template serves both: Half16<T> gives
// the conversions of one element's bits, of the two elements of a 32-bit word (lo: the low half)
// and of eight in a uint4, 1.0's bits, and the tensor-core product (mma.sync m16n8k16 with FP32
// accumulators: .bf16 or .f16 inputs; ldmatrix and the fragment layouts are the same for both).
// The bf16 instantiations compile to the PTX the bf16-only kernels had (checked kernel by kernel
// when the templates were introduced), so keep the helpers' shapes (a uint4 loaded into a local
// before it is unpacked: passed by reference, 64-bit-indexed loops lost their 16-byte loads).
// Trap: the bf16 traits call core/bf16.h's rounding, exactly what the bf16 kernels always did; the
// f16 ones use the hardware's cvt.rn (__float2half_rn, __floats2half2_rn), whose bits equal
// core/fp16.h's f16_bits_from_float for every non-NaN value (overflow past 65504 becomes inf,
// small values subnormals); a NaN comes out as a NaN with another payload.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/view.h"

namespace cnn {

template <typename T>
struct Half16;

template <>
struct Half16<bf16> {
  static constexpr uint16_t kOne = 0x3f80;
  static constexpr const char* kName = "bf16";
  __device__ __forceinline__ static float to_float(uint16_t b) { return float_from_bf16_bits(b); }
  __device__ __forceinline__ static uint16_t from_float(float f) { return bf16_bits_from_float(f); }
  __device__ __forceinline__ static uint32_t pack2(float lo, float hi) { return pack_bf16x2(lo, hi); }
  // The low and the high element of a 32-bit word of two.
  __device__ __forceinline__ static float lo(uint32_t u) { return float_from_bits(u << 16); }
  __device__ __forceinline__ static float hi(uint32_t u) { return float_from_bits(u & 0xffff0000u); }
  // c (16 x 8, FP32) += a (16 x 16) * b (16 x 8)
  __device__ __forceinline__ static void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <>
struct Half16<f16> {
  static constexpr uint16_t kOne = 0x3c00;
  static constexpr const char* kName = "f16";
  __device__ __forceinline__ static float to_float(uint16_t b) { return __half2float(__ushort_as_half(b)); }
  __device__ __forceinline__ static uint16_t from_float(float f) { return __half_as_ushort(__float2half_rn(f)); }
  __device__ __forceinline__ static uint32_t pack2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);  // .x (low half) = lo
    uint32_t u;
    memcpy(&u, &h, sizeof u);
    return u;
  }
  __device__ __forceinline__ static float lo(uint32_t u) { return to_float(static_cast<uint16_t>(u & 0xffffu)); }
  __device__ __forceinline__ static float hi(uint32_t u) { return to_float(static_cast<uint16_t>(u >> 16)); }
  __device__ __forceinline__ static void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

// Element i of a T array as a float, and a float rounded once into element i.
template <typename T>
__device__ __forceinline__ float half16_load(const T* p, int64_t i) {
  return Half16<T>::to_float(reinterpret_cast<const uint16_t*>(p)[i]);
}
template <typename T>
__device__ __forceinline__ void half16_store(T* p, int64_t i, float v) {
  reinterpret_cast<uint16_t*>(p)[i] = Half16<T>::from_float(v);
}
// The 8 elements at p (16 bytes, 16-byte aligned) as floats, and 8 floats rounded once into p.
template <typename T>
__device__ __forceinline__ void half16_unpack8(const uint4& u, float (&v)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    v[2 * k] = Half16<T>::lo(w[k]);
    v[2 * k + 1] = Half16<T>::hi(w[k]);
  }
}
template <typename T>
__device__ __forceinline__ void half16_load8(const T* p, float (&v)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);  // one 16-byte load, then the registers
  half16_unpack8<T>(u, v);
}
template <typename T>
__device__ __forceinline__ uint4 half16_pack8(const float (&v)[8]) {
  return make_uint4(Half16<T>::pack2(v[0], v[1]), Half16<T>::pack2(v[2], v[3]), Half16<T>::pack2(v[4], v[5]),
                    Half16<T>::pack2(v[6], v[7]));
}
template <typename T>
__device__ __forceinline__ void half16_store8(T* p, const float (&v)[8]) {
  *reinterpret_cast<uint4*>(p) = half16_pack8<T>(v);
}

// ---- float (f32cl: tf32's channels-last FP32 activations) under the same names ----
// A channels-last kernel templated on T serves T = float too through these: an element is loaded
// and stored as itself (no rounding), and 8 lanes are 32 bytes (two 16-byte words) where 16-bit
// types pack them into one. Code that holds 8 lanes as loaded before unpacking them uses Raw8<T>
// (one uint4 for bf16 and f16, two for float) with load_raw8 / unpack_raw8 / pack_raw8.
template <>
__device__ __forceinline__ float half16_load<float>(const float* p, int64_t i) {
  return p[i];
}
template <>
__device__ __forceinline__ void half16_store<float>(float* p, int64_t i, float v) {
  p[i] = v;
}
template <>
__device__ __forceinline__ void half16_load8<float>(const float* p, float (&v)[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
template <>
__device__ __forceinline__ void half16_store8<float>(float* p, const float (&v)[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// 8 consecutive T as loaded (16-byte aligned), unpacked later.
template <typename T>
struct Raw8 {
  uint4 u;
};
template <>
struct Raw8<float> {
  uint4 a, b;
};
template <typename T>
__device__ __forceinline__ void load_raw8(const T* p, Raw8<T>& r) {
  r.u = *reinterpret_cast<const uint4*>(p);
}
template <>
__device__ __forceinline__ void load_raw8<float>(const float* p, Raw8<float>& r) {
  r.a = reinterpret_cast<const uint4*>(p)[0];
  r.b = reinterpret_cast<const uint4*>(p)[1];
}
template <typename T>
__device__ __forceinline__ void unpack_raw8(const Raw8<T>& r, float (&v)[8]) {
  half16_unpack8<T>(r.u, v);
}
template <>
__device__ __forceinline__ void unpack_raw8<float>(const Raw8<float>& r, float (&v)[8]) {
  const uint32_t w[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
  for (int k = 0; k < 8; ++k) v[k] = __uint_as_float(w[k]);
}
template <typename T>
__device__ __forceinline__ Raw8<T> pack_raw8(const float (&v)[8]) {
  return Raw8<T>{half16_pack8<T>(v)};
}
template <>
__device__ __forceinline__ Raw8<float> pack_raw8<float>(const float (&v)[8]) {
  return Raw8<float>{make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                                __float_as_uint(v[3])),
                     make_uint4(__float_as_uint(v[4]), __float_as_uint(v[5]), __float_as_uint(v[6]),
                                __float_as_uint(v[7]))};
}
// One element as loaded (its bits), unpacked later: the scalar (1-lane) paths.
template <typename T>
struct Raw1 {
  uint16_t u;
};
template <>
struct Raw1<float> {
  float u;
};
template <typename T>
__device__ __forceinline__ void load_raw1(const T* p, int64_t i, Raw1<T>& r) {
  r.u = reinterpret_cast<const uint16_t*>(p)[i];
}
template <>
__device__ __forceinline__ void load_raw1<float>(const float* p, int64_t i, Raw1<float>& r) {
  r.u = p[i];
}
template <typename T>
__device__ __forceinline__ float unpack_raw1(const Raw1<T>& r) {
  return Half16<T>::to_float(r.u);
}
template <>
__device__ __forceinline__ float unpack_raw1<float>(const Raw1<float>& r) {
  return r.u;
}

// A view's data as T (checked like View::bf16_data / f16_data: another dtype throws), for host code
// templated on the element type.
template <typename T>
const T* half16_data(const ConstView& v) {
  if constexpr (std::is_same_v<T, float>)
    return v.f32();  // f32cl (or f32)
  else if constexpr (std::is_same_v<T, f16>)
    return v.f16_data();
  else
    return v.bf16_data();
}
template <typename T>
T* half16_data(const View& v) {
  if constexpr (std::is_same_v<T, float>)
    return v.f32();
  else if constexpr (std::is_same_v<T, f16>)
    return v.f16_data();
  else
    return v.bf16_data();
}

// The checked T pointers of `count` views (ops that index an array of operands: add, concat).
template <typename T>
std::vector<const T*> half16_pointers(const ConstView* views, size_t count) {
  std::vector<const T*> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = half16_data<T>(views[i]);
  return out;
}
template <typename T>
std::vector<T*> half16_pointers(const View* views, size_t count) {
  std::vector<T*> out(count);
  for (size_t i = 0; i < count; ++i) out[i] = half16_data<T>(views[i]);
  return out;
}

}  // namespace cnn
