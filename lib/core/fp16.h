// FP16 storage (IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits) and its conversions, written
// once for the CPU emulation and the CUDA kernels alike (CNN_HD), so both round the same values to
// the same bits (the twin of core/bf16.h).
// Trap: float -> f16 rounds to nearest, ties to even, exactly as the GPU's cvt.rn.f16.f32 does for
// every non-NaN input: past 65504 (from 65520 on) it becomes inf, below 2^-14 it becomes a
// subnormal (steps of 2^-24), at most 2^-25 it becomes a signed zero. A NaN stays a NaN (sign and
// top payload bits kept, quiet bit set). The range is FP32's 2^-126..2^128 cut to 2^-24..65504:
// that is why fp16 training needs a loss scale (optim/loss_scaler.h) and bf16 does not.
#pragma once

#include <cstdint>

#include "core/float_bits.h"
#include "core/host_device.h"

namespace cnn {

// One FP16 value: its bits. Plain data (no arithmetic), 2 bytes, so arrays of it are the device
// layout; convert to float to compute.
struct f16 {
  uint16_t bits;
};
static_assert(sizeof(f16) == 2, "f16 is two bytes of storage");

// The largest finite f16 and the smallest normal one.
inline constexpr float kF16Max = 65504.0f;
inline constexpr float kF16MinNormal = 6.103515625e-05f;  // 2^-14

CNN_HD uint16_t f16_bits_from_float(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x01ffu));  // NaN stays NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // 65520 (the tie above 65504) and up: inf
  if (a >= 0x38800000u) {
    // Normal: rebias the exponent (127 -> 15), then round the 13 dropped bits to nearest even; a
    // carry out of the mantissa increments the exponent, which is the correct rounding.
    const uint32_t r = a - 0x38000000u;
    return static_cast<uint16_t>(sign | ((r + 0x0fffu + ((r >> 13) & 1u)) >> 13));
  }
  if (a < 0x33000000u) return sign;  // below 2^-25 (half the smallest subnormal): zero
  // Subnormal: the 24-bit significand shifted down to units of 2^-24, rounded to nearest even; a
  // round up to 0x400 is the smallest normal, again the right bits.
  const uint32_t m = (a & 0x007fffffu) | 0x00800000u;
  const uint32_t shift = 126u - (a >> 23);  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// Exact: every f16 is a float.
CNN_HD float float_from_f16_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x03ffu;
  if (e == 0x1fu) return float_from_bits(sign | 0x7f800000u | (m << 13));  // inf, NaN
  if (e != 0) return float_from_bits(sign | ((e + 112u) << 23) | (m << 13));
  const float v = static_cast<float>(m) * 5.9604644775390625e-08f;  // subnormal or zero: m * 2^-24, exact
  return sign ? -v : v;
}

CNN_HD f16 to_f16(float f) { return f16{f16_bits_from_float(f)}; }
CNN_HD float to_float(f16 h) { return float_from_f16_bits(h.bits); }
// f rounded to the nearest f16 and back: where the CPU emulation stores a value in FP16.
CNN_HD float round_to_f16(float f) { return to_float(to_f16(f)); }

// Two floats into one 32-bit word of two f16 (lo in the low half): the device's packed layout.
CNN_HD uint32_t pack_f16x2(float lo, float hi) {
  return static_cast<uint32_t>(f16_bits_from_float(lo)) | (static_cast<uint32_t>(f16_bits_from_float(hi)) << 16);
}

}  // namespace cnn
