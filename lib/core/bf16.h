// BF16 storage (the top 16 bits of an IEEE float) and its conversions, written once for the CPU
// emulation and the CUDA kernels alike (CNN_HD), so both round the same values to the same bits.
// Trap: float -> bf16 rounds to nearest, ties to even, exactly as the GPU's cvt.rn.bf16.f32 does
// for every non-NaN input (overflow past the largest bf16 becomes inf); a NaN stays a NaN (sign
// and top payload bits kept, quiet bit set) instead of rounding into an infinity.
#pragma once

#include <cstdint>

#include "core/float_bits.h"
#include "core/host_device.h"

namespace cnn {

// One BF16 value: its bits. Plain data (no arithmetic), 2 bytes, so arrays of it are the device
// layout; convert to float to compute.
struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2, "bf16 is two bytes of storage");

// Round to nearest even: add 0x7fff plus the lowest kept bit, then truncate. A carry out of the
// mantissa increments the exponent, which is the correct rounding (up to inf past 0x7f7f).
CNN_HD uint16_t bf16_bits_from_float(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN stays NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
CNN_HD float float_from_bf16_bits(uint16_t b) { return float_from_bits(static_cast<uint32_t>(b) << 16); }

CNN_HD bf16 to_bf16(float f) { return bf16{bf16_bits_from_float(f)}; }
CNN_HD float to_float(bf16 b) { return float_from_bf16_bits(b.bits); }
// f rounded to the nearest bf16 and back: where the CPU emulation stores a value in BF16.
CNN_HD float round_to_bf16(float f) { return to_float(to_bf16(f)); }

// Two floats into one 32-bit word of two bf16 (lo in the low half): the device's packed layout.
CNN_HD uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<uint32_t>(bf16_bits_from_float(lo)) | (static_cast<uint32_t>(bf16_bits_from_float(hi)) << 16);
}

}  // namespace cnn
