// FP16 storage (core/fp16.h): known bit patterns (normal, subnormal, ties, overflow, NaN), every one
// of the 65536 f16 values round-tripped through float, the rounding of every midpoint between
// neighbouring f16 values and of the floats around it, and (where the compiler has _Float16, whose
// conversion is IEEE round to nearest even) agreement with the compiler on a sweep of floats.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/fp16.h"
#include "core/tensor.h"
#include "core/view.h"
#include "support/catch.h"

using namespace cnn;

namespace {

float from_bits(uint32_t u) { return float_from_bits(u); }
bool is_nan_bits(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }

}  // namespace

TEST_CASE("f16: known values round to their bit patterns", "[cpu]") {
  CHECK(f16_bits_from_float(1.0f) == 0x3c00);
  CHECK(f16_bits_from_float(-2.0f) == 0xc000);
  CHECK(f16_bits_from_float(0.5f) == 0x3800);
  CHECK(f16_bits_from_float(0.1f) == 0x2e66);
  CHECK(f16_bits_from_float(1.0f / 3.0f) == 0x3555);
  CHECK(f16_bits_from_float(0.0f) == 0x0000);
  CHECK(f16_bits_from_float(-0.0f) == 0x8000);
  CHECK(f16_bits_from_float(1.0f + 0x1p-11f) == 0x3c00);          // tie, even stays
  CHECK(f16_bits_from_float(1.0f + 3 * 0x1p-11f) == 0x3c02);      // tie, odd rounds up
  CHECK(f16_bits_from_float(from_bits(0x3f801001u)) == 0x3c01);   // just past the tie
  CHECK(f16_bits_from_float(2047.5f) == 0x6800);                  // 2047.5 ties up to 2048 (odd last bit)
  CHECK(f16_bits_from_float(65504.0f) == 0x7bff);                 // the largest finite
  CHECK(f16_bits_from_float(65519.99f) == 0x7bff);                // below the tie: stays finite
  CHECK(f16_bits_from_float(65520.0f) == 0x7c00);                 // the tie above 65504: inf
  CHECK(f16_bits_from_float(-1e6f) == 0xfc00);
  CHECK(f16_bits_from_float(std::numeric_limits<float>::max()) == 0x7c00);
  CHECK(f16_bits_from_float(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(f16_bits_from_float(-std::numeric_limits<float>::infinity()) == 0xfc00);
  // Subnormals: steps of 2^-24 below 2^-14.
  CHECK(f16_bits_from_float(0x1p-14f) == 0x0400);                 // the smallest normal
  CHECK(f16_bits_from_float(0x1p-15f) == 0x0200);
  CHECK(f16_bits_from_float(0x1p-24f) == 0x0001);                 // the smallest subnormal
  CHECK(f16_bits_from_float(-0x1p-24f) == 0x8001);
  CHECK(f16_bits_from_float(0x1p-25f) == 0x0000);                 // tie with zero: even (zero)
  CHECK(f16_bits_from_float(-0x1p-25f) == 0x8000);
  CHECK(f16_bits_from_float(from_bits(0x33000001u)) == 0x0001);   // just past it
  CHECK(f16_bits_from_float(1.5f * 0x1p-24f) == 0x0002);          // tie, odd rounds up
  CHECK(f16_bits_from_float(2.5f * 0x1p-24f) == 0x0002);          // tie, even stays
  CHECK(f16_bits_from_float(0x1p-14f - 0x1p-25f) == 0x0400);      // tie below 2^-14: up into the normals
  CHECK(f16_bits_from_float(1e-10f) == 0x0000);
  CHECK(f16_bits_from_float(std::numeric_limits<float>::denorm_min()) == 0x0000);
  // NaN stays NaN, its sign and top payload bits kept, quiet.
  CHECK(f16_bits_from_float(std::numeric_limits<float>::quiet_NaN()) == 0x7e00);
  CHECK(f16_bits_from_float(from_bits(0xffc00000u)) == 0xfe00);
  CHECK(is_nan_bits(f16_bits_from_float(from_bits(0x7f800001u))));  // a signalling NaN with low payload only
  CHECK(f16_bits_from_float(from_bits(0x7fa02000u)) == 0x7f01);
  // Widening.
  CHECK(float_from_f16_bits(0x3c00) == 1.0f);
  CHECK(float_from_f16_bits(0x7bff) == 65504.0f);
  CHECK(float_from_f16_bits(0x0001) == 0x1p-24f);
  CHECK(float_from_f16_bits(0x03ff) == 1023 * 0x1p-24f);
  CHECK(std::signbit(float_from_f16_bits(0x8000)));
  CHECK(float_from_f16_bits(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(float_from_f16_bits(0x7e00)));
  CHECK(kF16Max == float_from_f16_bits(0x7bff));
  CHECK(kF16MinNormal == float_from_f16_bits(0x0400));
  CHECK(pack_f16x2(1.0f, -2.0f) == 0xc0003c00u);
  CHECK(round_to_f16(0.1f) == float_from_f16_bits(0x2e66));
  CHECK(to_float(to_f16(-0.5f)) == -0.5f);
  CHECK(DTypeOf<f16>::value == DType::f16);
}

TEST_CASE("f16: tensors and views of f16 widen exactly and check their dtype", "[cpu]") {
  Tensor t = Tensor::zeros(Shape{3}, Device::cpu, "t", DType::f16);
  CHECK(t.bytes() == 6);
  f16* p = t.view().f16_data();
  p[0] = to_f16(1.5f);
  p[1] = to_f16(-65504.0f);
  p[2] = f16{0x0001};
  CHECK(t.to_vector() == std::vector<float>{1.5f, -65504.0f, 0x1p-24f});
  CHECK_THROWS_AS(t.view().bf16_data(), Error);
  CHECK_THROWS_AS(t.data(), Error);
  const ConstView v = static_cast<const f16*>(p);
  CHECK(v.dtype() == DType::f16);
  CHECK(v.f16_data() == p);
  CHECK_THROWS_AS(ConstView(static_cast<const void*>(p), DType::bf16).f16_data(), Error);
}

TEST_CASE("f16: every value round-trips through float exactly (quiet NaNs included)", "[cpu]") {
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const uint16_t bits = static_cast<uint16_t>(h);
    const float f = float_from_f16_bits(bits);
    CHECK(std::isnan(f) == is_nan_bits(bits));
    const uint16_t back = f16_bits_from_float(f);
    // A signalling NaN (quiet bit clear) comes back quiet, all else bit for bit.
    const uint16_t want = is_nan_bits(bits) ? static_cast<uint16_t>(bits | 0x0200u) : bits;
    mismatches += back != want;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("f16: every midpoint between neighbours rounds to the even one, the floats beside it to the nearer", "[cpu]") {
  int wrong = 0;
  for (uint16_t lo = 0; lo < 0x7bff; ++lo) {  // positive finite neighbours (lo, lo + 1)
    const uint16_t hi = static_cast<uint16_t>(lo + 1);
    const double a = float_from_f16_bits(lo), b = float_from_f16_bits(hi);
    const float mid = static_cast<float>((a + b) / 2);  // exact: 12 significant bits
    const uint16_t even = (lo & 1u) ? hi : lo;
    wrong += f16_bits_from_float(mid) != even;
    wrong += f16_bits_from_float(std::nextafter(mid, 0.0f)) != lo;
    wrong += f16_bits_from_float(std::nextafter(mid, 1e30f)) != hi;
    wrong += f16_bits_from_float(-mid) != (even | 0x8000u);
  }
  CHECK(wrong == 0);
}

#if defined(__FLT16_MAX__)
TEST_CASE("f16: rounding agrees with the compiler's _Float16 over a sweep of floats", "[cpu]") {
  int wrong = 0;
  // Every 4099th bit pattern (odd stride: every residue of the low bits occurs) plus its neighbours.
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4099) {
    for (uint32_t d = 0; d < 3; ++d) {
      const float f = from_bits(static_cast<uint32_t>(u + d));
      if (std::isnan(f)) continue;
      const _Float16 h = static_cast<_Float16>(f);
      uint16_t want;
      std::memcpy(&want, &h, sizeof want);
      wrong += f16_bits_from_float(f) != want;
    }
  }
  CHECK(wrong == 0);
}
#endif
