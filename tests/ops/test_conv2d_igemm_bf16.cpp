// CPU tests of the BF16 tensor-core convolution's host side: BF16 rounding (core/bf16.h) against an
// independent nearest-even rule in double, the CPU casts, the index decoders of the implicit GEMM
// (each direction's GEMM rebuilt through them must equal the double reference convolution), the
// reduction walk of the filter gradient, the direct kernels' data-gradient tap walk, and the plan's
// cost model. The kernels themselves are tested on the GPU in test_conv2d_igemm_bf16_cuda.cpp.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "core/bf16.h"
#include "ops/cast_bf16.h"
#include "ops/conv2d.h"
#include "ops/conv2d_igemm_bf16.h"
#include "ops/conv2d_igemm_bf16_decode.h"
#include "support/catch.h"
#include "support/decoder_shapes.h"
#include "support/test_util.h"

using namespace cnn;
using namespace cnn::igemm_bf16_detail;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Nearest bf16 by comparing distances in double (ties: even last bit): independent of the
// add-and-truncate trick in core/bf16.h. Finite inputs only.
uint16_t nearest_even_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t down = static_cast<uint16_t>(u >> 16);  // toward zero
  const uint16_t up = static_cast<uint16_t>(down + 1);   // away from zero (may become inf)
  const double x = std::fabs(double(f));
  const double a = std::fabs(double(float_from_bf16_bits(down)));
  // Rounding up from the largest finite bf16 gives inf, which stands for 2^128 here (IEEE rounds as
  // if the exponent were unbounded, then overflows).
  const double b = (up & 0x7fff) == 0x7f80 ? std::ldexp(1.0, 128) : std::fabs(double(float_from_bf16_bits(up)));
  if (x - a < b - x) return down;
  if (b - x < x - a) return up;
  return (down & 1) ? up : down;
}

}  // namespace

TEST_CASE("bf16 rounding is round to nearest even and keeps NaN", "[cpu]") {
  CHECK(bf16_bits_from_float(1.0f) == 0x3f80);
  CHECK(bf16_bits_from_float(-2.0f) == 0xc000);
  CHECK(bf16_bits_from_float(from_bits(0x3f808000u)) == 0x3f80);  // 1 + 2^-8: tie, even stays
  CHECK(bf16_bits_from_float(from_bits(0x3f818000u)) == 0x3f82);  // tie, odd rounds up
  CHECK(bf16_bits_from_float(from_bits(0x3f808001u)) == 0x3f81);  // past the tie
  CHECK(bf16_bits_from_float(std::numeric_limits<float>::max()) == 0x7f80);  // overflows to inf
  CHECK(bf16_bits_from_float(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(bf16_bits_from_float(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(bf16_bits_from_float(-0.0f) == 0x8000);
  CHECK(bf16_bits_from_float(from_bits(0x00018000u)) == 0x0002);  // subnormal tie, odd rounds up
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc12345u, 0x7fffffffu}) {
    const uint16_t b = bf16_bits_from_float(from_bits(nan));
    INFO(fmt::format("nan {:#x} -> {:#x}", nan, b));
    CHECK(std::isnan(float_from_bf16_bits(b)));
    CHECK((b & 0x8000) == ((nan >> 16) & 0x8000));
  }
  std::mt19937 gen(7);
  int mismatches = 0;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = gen();
    if ((u & 0x7f800000u) == 0x7f800000u) u &= 0xbfffffffu;  // finite only
    if (bf16_bits_from_float(from_bits(u)) != nearest_even_bf16(from_bits(u))) ++mismatches;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("bf16 casts on the cpu round once and widen exactly", "[cpu]") {
  const ExecContext ctx = ExecContext::cpu(2);
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<bf16> in(all.size());
  std::memcpy(in.data(), all.data(), all.size() * 2);
  std::vector<float> wide(all.size());
  cast_bf16_to_float_cpu(ctx, int64_t(in.size()), in.data(), wide.data());
  std::vector<bf16> back(all.size());
  cast_float_to_bf16_cpu(ctx, int64_t(wide.size()), wide.data(), back.data());
  int bad = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool nan = std::isnan(wide[i]);
    if (nan ? !std::isnan(to_float(back[i])) : back[i].bits != all[i]) ++bad;
  }
  CHECK(bad == 0);
  const std::vector<float> x = test::random_floats(1000, 3, -1e3f, 1e3f);
  std::vector<bf16> y(x.size());
  cast_float_to_bf16_cpu(ctx, int64_t(x.size()), x.data(), y.data());
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(y[i].bits == bf16_bits_from_float(x[i]));
}

TEST_CASE("igemm division by run-time constants matches integer division", "[cpu]") {
  std::mt19937 gen(11);
  for (int64_t d : {1, 2, 3, 5, 7, 9, 25, 40, 1600, 4608, 65537, 1000003}) {
    const Div div(d);
    for (int i = 0; i < 20000; ++i) {
      const int n = static_cast<int>(gen() & 0x7fffffffu) >> (i % 24);
      int q, r;
      div.divmod(n, q, r);
      REQUIRE(q == n / d);
      REQUIRE(r == n % d);
    }
  }
}

TEST_CASE("igemm bf16 decoders rebuild every direction's GEMM", "[cpu]") {
  const ExecContext cpu = ExecContext::cpu(1);
  uint64_t seed = 100;
  for (Conv2dShape sh : test::decoder_shapes()) {
    sh.has_bias = false;
    INFO(sh.to_string());
    seed += 10;
    const std::vector<double> x = test::random_doubles(sh.N * sh.C * sh.H * sh.W, seed);
    const std::vector<double> w = test::random_doubles(sh.weight_numel(), seed + 1);
    const std::vector<double> dy = test::random_doubles(sh.N * sh.K * sh.P * sh.Q, seed + 2);
    std::vector<double> y(dy.size()), dx(x.size()), dw(w.size());
    conv2d_forward_reference<double>(cpu, sh, x.data(), w.data(), nullptr, y.data());
    conv2d_backward_reference<double>(cpu, sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), nullptr);
    const int K = int(sh.K), C = int(sh.C), RS = int(sh.R * sh.S), CRS = C * RS, KRS = K * RS;
    const int PQ = int(sh.P * sh.Q), HW = int(sh.H * sh.W), NPQ = int(sh.N) * PQ, NHW = int(sh.N) * HW;

    // forward: y (N, K, PQ) = w (K, CRS) * B (CRS, NPQ)
    const ForwardDecode fd = ForwardDecode::make(sh);
    std::vector<double> y2(y.size(), 0.0);
    for (int col = 0; col < NPQ; ++col) {
      const Tap c = fd.column(col);
      for (int k = 0; k < K; ++k) {
        double s = 0;
        for (int crs = 0; crs < CRS; ++crs) {
          const Tap t = fd.tap(crs);
          if (fd.valid(c, t)) s += w[size_t(k * CRS + crs)] * x[size_t(c.off + t.off)];
        }
        y2[size_t((col / PQ * K + k) * PQ + col % PQ)] = s;
      }
    }
    CHECK(test::rel_l2_error(y2, y) < 1e-12);

    // backward data: dx (N, C, HW) = wt (C, KRS) * B (KRS, NHW), for both decoder forms
    auto check_data = [&](auto decode) {
      std::vector<double> dx2(dx.size(), 0.0);
      for (int col = 0; col < NHW; ++col) {
        const Tap c = decode.column(col);
        for (int ch = 0; ch < C; ++ch) {
          double s = 0;
          for (int krs = 0; krs < KRS; ++krs) {
            const Tap t = decode.tap(krs);
            if (decode.valid(c, t)) s += w[size_t((krs / RS * C + ch) * RS + krs % RS)] * dy[size_t(c.off + t.off)];
          }
          dx2[size_t((col / HW * C + ch) * HW + col % HW)] = s;
        }
      }
      return test::rel_l2_error(dx2, dx);
    };
    DataDecode dd = DataDecode::make(sh);
    CHECK(check_data(dd) < 1e-12);
    dd.strided = true;  // the residue path on stride 1 too
    CHECK(check_data(dd) < 1e-12);

    // backward filter: dw (K, CRS) = dy (K, NPQ) * B^T, the reduction walked 8 positions a chunk
    const FilterDecode wd = FilterDecode::make(sh);
    std::vector<double> dw2(dw.size(), 0.0);
    for (int red0 = 0; red0 < NPQ; red0 += 8) {
      FilterDecode::Walk pos = wd.start(red0);
      for (int j = 0; j < 8 && red0 + j < NPQ; ++j) {
        const FilterDecode::Walk direct = wd.start(red0 + j);
        REQUIRE((pos.n == direct.n && pos.p == direct.p && pos.q == direct.q));
        const Tap corner = wd.corner(pos);
        for (int crs = 0; crs < CRS; ++crs) {
          const Tap c = wd.column(crs);
          if (!wd.valid(c, corner)) continue;
          for (int k = 0; k < K; ++k)
            dw2[size_t(k * CRS + crs)] += dy[size_t(wd.dy_offset(pos) + k * PQ)] * x[size_t(c.off + corner.off)];
        }
        wd.next(pos);
      }
    }
    CHECK(test::rel_l2_error(dw2, dw) < 1e-12);
  }
}

TEST_CASE("for_each_data_tap visits exactly the taps through which an input pixel feeds an output", "[cpu]") {
  struct Params {  // the fields the direct kernels' parameters carry
    Div div_sh, div_sw;
    int R, S, P, Q, ph, pw, dh, dw;
  };
  for (const Conv2dShape& sh : test::decoder_shapes()) {
    INFO(sh.to_string());
    const Params d{Div(sh.stride_h), Div(sh.stride_w), int(sh.R), int(sh.S),     int(sh.P),
                   int(sh.Q),        sh.pad_h,         sh.pad_w,  sh.dilation_h, sh.dilation_w};
    int mismatches = 0;
    for (int h = 0; h < sh.H; ++h)
      for (int w = 0; w < sh.W; ++w) {
        std::vector<std::array<int, 4>> got, want;
        for_each_data_tap(d, h, w, [&](int r, int s, int p, int q) { got.push_back({r, s, p, q}); });
        for (int r = 0; r < sh.R; ++r)  // every (tap, output) pair whose window puts tap (r, s) on (h, w)
          for (int s = 0; s < sh.S; ++s)
            for (int p = 0; p < sh.P; ++p)
              for (int q = 0; q < sh.Q; ++q)
                if (p * sh.stride_h - sh.pad_h + r * sh.dilation_h == h &&
                    q * sh.stride_w - sh.pad_w + s * sh.dilation_w == w)
                  want.push_back({r, s, p, q});
        mismatches += got != want;
      }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("igemm bf16 window masks say which taps of a column exist", "[cpu]") {
  for (const Conv2dShape& sh : test::decoder_shapes()) {
    INFO(sh.to_string());
    auto check = [](const auto& dec, int ncols, int nred) {  // columns in groups of 8, as a kernel thread
      int mismatches = 0;
      for (int col0 = 0; col0 < ncols; col0 += 8) {
        Tap cols[8];
        uint32_t masks[8];
        for (int j = 0; j < 8; ++j) cols[j] = col0 + j < ncols ? dec.column(col0 + j) : invalid_tap();
        window_masks(dec, cols, masks);
        for (int j = 0; j < 8; ++j)
          for (int red = 0; red < nred; ++red) {
            const Tap t = dec.tap(red);
            const bool exists = col0 + j < ncols && dec.valid(cols[j], t);
            if (exists != (((masks[j] >> t.rs) & 1u) != 0)) ++mismatches;
          }
      }
      return mismatches;
    };
    CHECK(check(ForwardDecode::make(sh), int(sh.N * sh.P * sh.Q), int(sh.C * sh.R * sh.S)) == 0);
    CHECK(check(DataDecode::make(sh), int(sh.N * sh.H * sh.W), int(sh.K * sh.R * sh.S)) == 0);
  }
}

TEST_CASE("igemm bf16 plans fit the shape and the workspace limit", "[cpu]") {
  const Conv2dShape conv1b = Conv2dShape::make(640, 64, 40, 40, 64, 3, 3, 1, 1, 1, 1);
  const Conv2dShape conv4b = Conv2dShape::make(64, 512, 5, 5, 512, 3, 3, 1, 1, 1, 1);
  const Conv2dShape pw = Conv2dShape::make(32, 8, 44, 44, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1, false);
  for (const Conv2dShape& sh : {conv1b, conv4b, pw})
    for (ConvDir dir : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
      INFO(sh.to_string() << " " << to_string(dir));
      const IgemmBf16Plan plan = conv2d_igemm_bf16_choose_plan(sh, dir, 132, size_t(1) << 30);
      CHECK(plan.tile >= 0);
      CHECK(plan.tile < kIgemmBf16Tiles);
      CHECK(conv2d_igemm_bf16_effective_splits(sh, dir, plan) == plan.splits);
      CHECK(conv2d_igemm_bf16_workspace_bytes(sh, dir, plan) <= size_t(1) << 30);
      const IgemmBf16Plan tight = conv2d_igemm_bf16_choose_plan(sh, dir, 132, 0);
      CHECK(tight.splits == 1);  // partial sums need workspace
    }
  // The filter gradient of conv1b reduces over 1M positions into 64 x 576: only a split fills 132 SMs.
  CHECK(conv2d_igemm_bf16_choose_plan(conv1b, ConvDir::backward_filter, 132, size_t(1) << 30).splits > 8);
  CHECK(conv2d_igemm_bf16_can_implement(conv4b));
  CHECK_FALSE(conv2d_igemm_bf16_can_implement(Conv2dShape::make(2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8)));
  const IgemmBf16Plan many{0, 1000000};
  CHECK(conv2d_igemm_bf16_effective_splits(conv4b, ConvDir::forward, many) == 512 * 9 / 32);  // a step per slice
}
