// Our own FFTs of the FFT convolution (conv2d_fft_transforms.h) against a DFT in double on the
// host, for every side they take: the forward transform of planes placed at an offset of a zero
// square, written frequency-major with a leading dimension past the plane count (the columns
// beyond stay untouched), and the inverse of exactly Hermitian spectra cropped, scaled and biased.
// Plane counts leave the last block part full.
#include <cuda_runtime.h>

#include <cmath>
#include <complex>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "ops/conv2d_fft_transforms.h"
#include "support/catch.h"
#include "support/device_floats.h"

using namespace cnn;
using cnn::test::DeviceFloats;

namespace {

using Complex = std::complex<double>;

struct Placement {
  int L, Hs, Ws, oh, ow;
};

// Spectrum (L, L / 2 + 1) of an Hs x Ws plane placed at (oh, ow) of a zero L x L plane.
std::vector<Complex> dft(const float* plane, const Placement& pl) {
  const int Fw = pl.L / 2 + 1;
  std::vector<Complex> out(size_t(pl.L) * Fw);
  const double two_pi = 2.0 * M_PI;
  for (int kh = 0; kh < pl.L; ++kh)
    for (int kw = 0; kw < Fw; ++kw) {
      Complex sum = 0;
      for (int h = 0; h < pl.Hs; ++h)
        for (int w = 0; w < pl.Ws; ++w) {
          const double angle = -two_pi * (double(kh) * (h + pl.oh) + double(kw) * (w + pl.ow)) / pl.L;
          sum += double(plane[h * pl.Ws + w]) * Complex(std::cos(angle), std::sin(angle));
        }
      out[size_t(kh) * Fw + kw] = sum;
    }
  return out;
}

std::vector<float> uniform(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace

TEST_CASE("conv2d fft own transforms take sides 8 16 32 and 64 only", "[cpu]") {
  for (int L : {8, 16, 32, 64}) CHECK(conv2d_fft_own_size(L));
  for (int L : {0, 4, 12, 24, 128}) CHECK_FALSE(conv2d_fft_own_size(L));
}

TEST_CASE("conv2d fft own forward transform matches a double dft, frequency-major", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Placement placements[] = {{8, 8, 8, 0, 0},    {8, 5, 6, 2, 1},   {16, 16, 16, 0, 0}, {16, 9, 13, 3, 2},
                                  {32, 32, 32, 0, 0}, {32, 9, 9, 0, 0},  {32, 27, 30, 2, 1}, {64, 64, 64, 0, 0},
                                  {64, 60, 50, 2, 7}};
  for (const Placement& pl : placements) {
    const int G = 256 / pl.L, F = pl.L * (pl.L / 2 + 1);
    const int64_t planes = 2 * G + 3, ld = planes + 5;
    INFO(fmt::format("L {}: {} planes of {}x{} at ({}, {}), ld {}", pl.L, planes, pl.Hs, pl.Ws, pl.oh, pl.ow, ld));
    const std::vector<float> x = uniform(size_t(planes) * pl.Hs * pl.Ws, uint32_t(pl.L + pl.Hs));
    DeviceFloats dx(x);
    DeviceFloats dout = DeviceFloats::poisoned(2 * F * ld);
    conv2d_fft_forward_transform(nullptr, dx.data(), planes, pl.Hs, pl.Ws, pl.oh, pl.ow, pl.L, dout.data(), ld);
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = dout.get();
    double worst = 0, largest = 0;
    int64_t untouched = 0;
    for (int64_t p = 0; p < planes; ++p) {
      const std::vector<Complex> ref = dft(x.data() + p * pl.Hs * pl.Ws, pl);
      for (int f = 0; f < F; ++f) {
        const Complex g(got[2 * (f * ld + p)], got[2 * (f * ld + p) + 1]);
        worst = std::max(worst, std::abs(g - ref[f]));
        largest = std::max(largest, std::abs(ref[f]));
      }
    }
    for (int f = 0; f < F; ++f)
      for (int64_t p = planes; p < ld; ++p) untouched += std::isnan(got[2 * (f * ld + p)]) ? 1 : 0;
    CHECK(largest > 1.0);
    CHECK(worst <= 2e-6 * largest);
    CHECK(untouched == F * (ld - planes));
  }
}

TEST_CASE("conv2d fft own inverse transform crops scales and biases a double dft's planes", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  struct Crop {
    int L, Ho, Wo, oh, ow;
    bool bias;
  };
  const Crop crops[] = {{8, 8, 8, 0, 0, false},     {8, 3, 5, 4, 2, true},    {16, 12, 16, 0, 0, true},
                        {16, 7, 5, 9, 11, false},   {32, 24, 24, 0, 0, true}, {32, 9, 9, 0, 0, false},
                        {32, 28, 30, 2, 1, false},  {64, 56, 56, 0, 0, true}, {64, 60, 50, 2, 7, false}};
  for (const Crop& c : crops) {
    const int L = c.L, G = 256 / L, Fw = L / 2 + 1, F = L * Fw, K = 5;
    const int64_t planes = 2 * G + 3, ld = planes + 2;
    INFO(fmt::format("L {}: {} planes cropped to {}x{} at ({}, {}), bias {}", L, planes, c.Ho, c.Wo, c.oh, c.ow,
                     c.bias));
    // Real L x L planes -> their exact (Hermitian) spectra, frequency-major.
    const std::vector<float> x = uniform(size_t(planes) * L * L, uint32_t(L + c.Ho));
    std::vector<float> spectra(size_t(2 * F * ld), 0.0f);
    for (int64_t p = 0; p < planes; ++p) {
      const std::vector<Complex> s = dft(x.data() + p * L * L, {L, L, L, 0, 0});
      for (int f = 0; f < F; ++f) {
        spectra[2 * (f * ld + p)] = float(s[f].real());
        spectra[2 * (f * ld + p) + 1] = float(s[f].imag());
      }
    }
    const std::vector<float> bias = uniform(K, 7);
    DeviceFloats dspec(spectra), dbias(bias);
    DeviceFloats dy = DeviceFloats::poisoned(planes * c.Ho * c.Wo);
    const float scale = 1.0f / float(L * L);
    conv2d_fft_inverse_transform(nullptr, dspec.data(), ld, planes, L, c.Ho, c.Wo, c.oh, c.ow, scale,
                                 c.bias ? dbias.data() : nullptr, K, dy.data());
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = dy.get();
    double worst = 0;
    for (int64_t p = 0; p < planes; ++p)
      for (int h = 0; h < c.Ho; ++h)
        for (int w = 0; w < c.Wo; ++w) {
          const double want = x[(p * L + h + c.oh) * L + w + c.ow] + (c.bias ? bias[p % K] : 0.0f);
          const double g = got[(p * c.Ho + h) * c.Wo + w];
          worst = std::max(worst, std::isnan(g) ? INFINITY : std::abs(g - want));
        }
    CHECK(worst <= 1e-5);
  }
}

// The checks come before any launch, so host pointers serve.
TEST_CASE("conv2d fft own transforms refuse sides and windows they do not take", "[cpu]") {
  std::vector<float> buf(2 * 32 * 17 * 4, 0.0f);
  float* b = buf.data();
  CHECK_THROWS_AS(conv2d_fft_forward_transform(nullptr, b, 1, 8, 8, 0, 0, 24, b, 1), Error);   // side
  CHECK_THROWS_AS(conv2d_fft_forward_transform(nullptr, b, 1, 30, 30, 3, 0, 32, b, 1), Error);  // past the square
  CHECK_THROWS_AS(conv2d_fft_forward_transform(nullptr, b, 2, 8, 8, 0, 0, 32, b, 1), Error);   // ld < planes
  CHECK_THROWS_AS(conv2d_fft_inverse_transform(nullptr, b, 1, 1, 32, 8, 8, 25, 0, 1.0f, nullptr, 1, b), Error);
  CHECK_THROWS_AS(conv2d_fft_inverse_transform(nullptr, b, 1, 1, 16, 8, 8, 0, 0, 1.0f, b, 0, b), Error);  // bias, K 0
}
