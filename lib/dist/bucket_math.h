// Pointwise work on gradient buckets, on the CPU or the GPU: scaling, division by the world size,
// and float <-> bfloat16 for compressed reductions. The bf16 rounding is written once here for
// both devices: round to nearest, ties to even (what PyTorch's .to(torch.bfloat16) does); a NaN
// stays a (quiet) NaN. Trap: `divide` really divides (x / d), so the mean is exact to the last
// bit for any world size, not just powers of two (x * (1/3) != x / 3 in float).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/exec_context.h"
#include "core/host_device.h"

namespace cnn {

CNN_HD uint16_t float_to_bf16(float f) {
#if defined(__CUDA_ARCH__)
  uint32_t u = __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
#endif
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

CNN_HD float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// On ctx.device (CPU loops or CUDA kernels queued on ctx's stream).
void scale_buffer(const ExecContext& ctx, float* x /* (n) */, int64_t n, float factor);
void divide_buffer(const ExecContext& ctx, float* x /* (n) */, int64_t n, float divisor);

// Host loops (the MPI path packs and unpacks in host memory).
void pack_bf16_host(const float* x /* (n) */, uint16_t* y /* (n) */, int64_t n);
void unpack_bf16_divide_host(const uint16_t* x /* (n) */, float* y /* (n) */, int64_t n, float divisor);

// --- CUDA (bucket_math_cuda.cu; bucket_math_nocuda.cpp throws without CUDA): queued on `stream`
// (a cudaStream_t), never synchronising. ---
void scale_buffer_cuda(void* stream, float* x, int64_t n, float factor);
void divide_buffer_cuda(void* stream, float* x, int64_t n, float divisor);
void pack_bf16_cuda(void* stream, const float* x, uint16_t* y, int64_t n);
void unpack_bf16_divide_cuda(void* stream, const uint16_t* x, float* y, int64_t n, float divisor);

}  // namespace cnn
