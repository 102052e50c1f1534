// Conv2d tests: hand-computed cases, finite-difference check of the reference backward (double),
// the fast CPU path against the float reference over generated shapes, and shape validation.
// Trap: outputs are pre-filled with NaN so a path that skips (or accumulates into) an output fails.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "ops/conv2d.h"
#include "support/catch.h"
#include "support/conv_sweep.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string thrown_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<nothing thrown>";
}

// Operands and outputs of one conv, filled with seeded random data (outputs with NaN).
struct ConvData {
  Conv2dShape sh;
  std::vector<float> x, w, b, dy, y, dx, dw, db;
  ConvData(const Conv2dShape& shape, uint64_t seed)
      : sh(shape),
        x(test::random_floats(sh.N * sh.C * sh.H * sh.W, seed)),
        w(test::random_floats(sh.weight_numel(), seed + 1)),
        b(test::random_floats(sh.K, seed + 2)),
        dy(test::random_floats(sh.N * sh.K * sh.P * sh.Q, seed + 3)),
        y(sh.N * sh.K * sh.P * sh.Q, kNaN),
        dx(x.size(), kNaN),
        dw(w.size(), kNaN),
        db(b.size(), kNaN) {}
};

using FastForward = void (*)(const ExecContext&, const Conv2dShape&, const float*, const float*, const float*, float*);
using FastBackward = void (*)(const ExecContext&, const Conv2dShape&, const float*, const float*, const float*, float*,
                              float*, float*);

// A fast path's forward and backward against the float reference on one shape's seeded operands.
void check_against_reference(const ExecContext& ctx, const Conv2dShape& sh, uint64_t seed, FastForward forward,
                             FastBackward backward) {
  ConvData fast(sh, seed), ref(sh, seed);
  forward(ctx, sh, fast.x.data(), fast.w.data(), fast.b.data(), fast.y.data());
  conv2d_forward_reference<float>(ctx, sh, ref.x.data(), ref.w.data(), ref.b.data(), ref.y.data());
  CHECK(compare(fast.y, ref.y, test::kFastCpuVsReference) == "");
  backward(ctx, sh, fast.x.data(), fast.w.data(), fast.dy.data(), fast.dx.data(), fast.dw.data(), fast.db.data());
  conv2d_backward_reference<float>(ctx, sh, ref.x.data(), ref.w.data(), ref.dy.data(), ref.dx.data(), ref.dw.data(),
                                   ref.db.data());
  CHECK(compare(fast.dx, ref.dx, test::kFastCpuVsReference) == "");
  CHECK(compare(fast.dw, ref.dw, test::kFastCpuVsReference) == "");
  CHECK(compare(fast.db, ref.db, test::kFastCpuVsReference) == "");
}

}  // namespace

TEST_CASE("conv2d shape computes the output size like PyTorch", "[cpu]") {
  // P = (H + 2*pad - dilation*(R-1) - 1)/stride + 1
  Conv2dShape a = Conv2dShape::make(2, 3, 28, 28, 8, 3, 3, 1, 1, 1, 1);
  CHECK(a.P == 28);
  CHECK(a.Q == 28);
  Conv2dShape b = Conv2dShape::make(1, 4, 11, 10, 4, 3, 2, 2, 3, 1, 0, 2, 1, 2);
  CHECK(b.P == (11 + 2 - 4 - 1) / 2 + 1);
  CHECK(b.Q == (10 - 1 - 1) / 3 + 1);
  CHECK(b.weight_numel() == 4 * 2 * 3 * 2);
  CHECK(b.to_string().find("groups 2") != std::string::npos);
}

TEST_CASE("conv2d shape rejects impossible shapes with a message", "[cpu]") {
  std::string m = thrown_message([] { Conv2dShape::make(1, 3, 8, 8, 4, 3, 3, 1, 1, 0, 0, 1, 1, 2); });
  INFO(m);
  CHECK(m.find("C=3 are not divisible by groups=2") != std::string::npos);
  m = thrown_message([] { Conv2dShape::make(1, 4, 8, 8, 3, 3, 3, 1, 1, 0, 0, 1, 1, 2); });
  CHECK(m.find("K=3 are not divisible by groups=2") != std::string::npos);
  m = thrown_message([] { Conv2dShape::make(1, 1, 4, 4, 1, 3, 3, 1, 1, 0, 0, 2, 2); });
  CHECK(m.find("output would be empty") != std::string::npos);
  CHECK(m.find("4x4") != std::string::npos);
  m = thrown_message([] { Conv2dShape::make(0, 1, 4, 4, 1, 3, 3); });
  CHECK(m.find("sizes must be positive") != std::string::npos);
  m = thrown_message([] { Conv2dShape::make(1, 1, 4, 4, 1, 3, 3, 0, 1); });
  CHECK(m.find("stride must be positive") != std::string::npos);
  m = thrown_message([] { Conv2dShape::make(1, 1, 4, 4, 1, 3, 3, 1, 1, -1, 0); });
  CHECK(m.find("padding must not be negative") != std::string::npos);
  m = thrown_message([] { Conv2dShape::make(1, 1, 4, 4, 1, 3, 3, 1, 1, 0, 0, 0, 1); });
  CHECK(m.find("dilation must be positive") != std::string::npos);
}

TEST_CASE("conv2d ops reject a hand-filled shape whose output size is wrong", "[cpu]") {
  ExecContext ctx = ExecContext::cpu(1);
  Conv2dShape sh = Conv2dShape::make(1, 1, 3, 3, 1, 2, 2);
  sh.P = 3;
  std::vector<float> x(9, 1.0f), w(4, 1.0f), b(1, 0.0f), y(9);
  CHECK_THROWS_AS(conv2d_forward_cpu(ctx, sh, x.data(), w.data(), b.data(), y.data()), Error);
  CHECK_THROWS_AS(conv2d_forward_reference<float>(ctx, sh, x.data(), w.data(), b.data(), y.data()), Error);
}

// x = [1 2 3; 4 5 6; 7 8 9], w = [1 2; 3 4], b = 0.5, stride 1, no padding:
//   y[p][q] = sum_rs x[p+r][q+s] w[r][s] + b: y00 = 1+4+12+20 +.5 = 37.5, y01 = 2+6+15+24 +.5 = 47.5,
//   y10 = 4+10+21+32 +.5 = 67.5, y11 = 5+12+24+36 +.5 = 77.5.
// dy = [1 -1; 2 0]:  db = 2;  dw[r][s] = sum_pq dy[p][q] x[p+r][q+s]:
//   dw00 = 1-2+8 = 7, dw01 = 2-3+10 = 9, dw10 = 4-5+14 = 13, dw11 = 5-6+16 = 15;
// dx[i][j] = sum_pq dy[p][q] w[i-p][j-q]:
//   row 0: 1, 2-1 = 1, -2;  row 1: 3+2 = 5, 4-3+4+0 = 5, -4+0 = -4;  row 2: 6, 8+0 = 8, 0.
TEST_CASE("conv2d matches a hand-computed 3x3 by 2x2 case", "[cpu]") {
  ExecContext ctx = ExecContext::cpu(2);
  Conv2dShape sh = Conv2dShape::make(1, 1, 3, 3, 1, 2, 2);
  const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8, 9}, w{1, 2, 3, 4}, b{0.5f}, dy{1, -1, 2, 0};
  const std::vector<float> y_want{37.5f, 47.5f, 67.5f, 77.5f};
  const std::vector<float> dx_want{1, 1, -2, 5, 5, -4, 6, 8, 0}, dw_want{7, 9, 13, 15}, db_want{2};
  for (bool fast : {false, true}) {
    INFO((fast ? "fast cpu" : "reference"));
    std::vector<float> y(4, kNaN), dx(9, kNaN), dw(4, kNaN), db(1, kNaN);
    if (fast) {
      conv2d_forward_cpu(ctx, sh, x.data(), w.data(), b.data(), y.data());
      conv2d_backward_cpu(ctx, sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
    } else {
      conv2d_forward_reference<float>(ctx, sh, x.data(), w.data(), b.data(), y.data());
      conv2d_backward_reference<float>(ctx, sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
    }
    CHECK(compare(y, y_want, test::kExact) == "");
    CHECK(compare(dx, dx_want, test::kExact) == "");
    CHECK(compare(dw, dw_want, test::kExact) == "");
    CHECK(compare(db, db_want, test::kExact) == "");
  }
}

// Same x and w, stride 2, padding 1, no bias: P = Q = (3+2-1-1)/2+1 = 2; windows start at -1 and 1.
//   y00 = x00*w11 = 4;  y01 = x01*w10 + x02*w11 = 6+12 = 18;
//   y10 = x10*w01 + x20*w11 = 8+28 = 36;  y11 = 5+12+24+36 = 77.
TEST_CASE("conv2d matches a hand-computed strided padded case", "[cpu]") {
  ExecContext ctx = ExecContext::cpu(2);
  Conv2dShape sh = Conv2dShape::make(1, 1, 3, 3, 1, 2, 2, 2, 2, 1, 1, 1, 1, 1, false);
  REQUIRE(sh.P == 2);
  const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8, 9}, w{1, 2, 3, 4}, y_want{4, 18, 36, 77};
  std::vector<float> y(4, kNaN), y_fast(4, kNaN);
  conv2d_forward_reference<float>(ctx, sh, x.data(), w.data(), nullptr, y.data());
  conv2d_forward_cpu(ctx, sh, x.data(), w.data(), nullptr, y_fast.data());
  CHECK(compare(y, y_want, test::kExact) == "");
  CHECK(compare(y_fast, y_want, test::kExact) == "");
}

TEST_CASE("conv2d reference backward matches finite differences in double", "[cpu]") {
  ExecContext ctx = ExecContext::cpu(1);
  // N, C, H, W, K, R, S, stride h/w, pad h/w, dilation h/w, groups
  const std::vector<Conv2dShape> shapes{
      Conv2dShape::make(2, 3, 5, 6, 4, 3, 3),
      Conv2dShape::make(1, 2, 7, 6, 3, 3, 2, 2, 2, 1, 0),
      Conv2dShape::make(2, 2, 6, 7, 2, 3, 3, 1, 1, 2, 1, 2, 2),
      Conv2dShape::make(1, 4, 5, 5, 6, 2, 3, 1, 2, 1, 1, 1, 1, 2),
      Conv2dShape::make(2, 3, 6, 5, 3, 3, 3, 2, 1, 1, 1, 1, 2, 3),  // depthwise
      Conv2dShape::make(2, 4, 4, 3, 2, 1, 1, 1, 1, 0, 0, 1, 1, 2, false),
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Conv2dShape& sh = shapes[i];
    INFO(sh.to_string());
    std::vector<double> x = test::random_doubles(sh.N * sh.C * sh.H * sh.W, 10 * i + 1);
    std::vector<double> w = test::random_doubles(sh.weight_numel(), 10 * i + 2);
    std::vector<double> b = test::random_doubles(sh.K, 10 * i + 3);
    const std::vector<double> r = test::random_doubles(sh.N * sh.K * sh.P * sh.Q, 10 * i + 4);
    std::vector<double> y(r.size());
    auto loss = [&] {
      conv2d_forward_reference<double>(ctx, sh, x.data(), w.data(), b.data(), y.data());
      double l = 0;
      for (size_t j = 0; j < y.size(); ++j) l += y[j] * r[j];
      return l;
    };
    // loss = sum(y * r), so dL/dy = r.
    std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
    conv2d_backward_reference<double>(ctx, sh, x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data());
    CHECK(compare(dx, test::numeric_gradient(x, loss), test::kFiniteDifference) == "");
    CHECK(compare(dw, test::numeric_gradient(w, loss), test::kFiniteDifference) == "");
    if (sh.has_bias) CHECK(compare(db, test::numeric_gradient(b, loss), test::kFiniteDifference) == "");
  }
}

// The shapes of the sweep: every stride, padding, dilation, groups and bias choice, for square,
// rectangular and 1x1 kernels, on odd non-square inputs; N alternates between 1 and 3.
static std::vector<Conv2dShape> sweep_shapes() { return test::conv_sweep_shapes(4, 6, true); }

TEST_CASE("conv2d fast cpu matches the reference over generated shapes", "[cpu]") {
  for (int threads : {1, 2, 3}) {
    ExecContext ctx = ExecContext::cpu(threads);
    for (const Conv2dShape& sh : sweep_shapes()) {
      INFO(fmt::format("{} threads, {}", threads, sh.to_string()));
      check_against_reference(ctx, sh, 7, conv2d_forward_cpu, conv2d_backward_cpu);
    }
  }
}

// Fewer images than threads: the forward splits each SGEMM over the threads (products of over
// 1 MFLOP; the sweep's shapes are below that and take one thread): column blocks, pointwise,
// grouped, with and without bias, against the reference and the one-thread result.
TEST_CASE("conv2d fast cpu forward with fewer images than threads splits its products and matches", "[cpu]") {
  const Conv2dShape shapes[] = {
      Conv2dShape::make(1, 64, 12, 12, 96, 3, 3, 1, 1, 1, 1),                   // 16 MFLOP, split by rows
      Conv2dShape::make(2, 32, 40, 40, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, false),  // split by columns, no bias
      Conv2dShape::make(1, 64, 10, 10, 128, 1, 1),                              // pointwise (x read directly)
      Conv2dShape::make(3, 48, 11, 9, 64, 5, 5, 2, 1, 2, 2, 1, 1, 2),           // grouped, strided
  };
  ExecContext one = ExecContext::cpu(1);
  for (int threads : {2, 4}) {
    ExecContext ctx = ExecContext::cpu(threads);
    for (const Conv2dShape& sh : shapes) {
      if (sh.N >= threads) continue;
      INFO(fmt::format("{} threads, {}", threads, sh.to_string()));
      ConvData d(sh, 5), serial(sh, 5);
      std::vector<float> ref(d.y.size());
      conv2d_forward_reference<float>(ctx, sh, d.x.data(), d.w.data(), d.b.data(), ref.data());
      conv2d_forward_cpu(ctx, sh, d.x.data(), d.w.data(), d.b.data(), d.y.data());
      conv2d_forward_cpu(one, sh, serial.x.data(), serial.w.data(), serial.b.data(), serial.y.data());
      CHECK(compare(d.y, ref, test::kFastCpuVsReference) == "");
      CHECK(compare(d.y, serial.y, test::kFastCpuVsReference) == "");
    }
  }
}

TEST_CASE("conv2d fast cpu backward computes any single gradient alone", "[cpu]") {
  ExecContext ctx = ExecContext::cpu(2);
  for (const Conv2dShape& sh : sweep_shapes()) {
    INFO(sh.to_string());
    ConvData d(sh, 11);
    std::vector<float> dx(d.dx.size()), dw(d.dw.size()), db(d.db.size());
    conv2d_backward_reference<float>(ctx, sh, d.x.data(), d.w.data(), d.dy.data(), dx.data(), dw.data(), db.data());
    conv2d_backward_cpu(ctx, sh, d.x.data(), d.w.data(), d.dy.data(), d.dx.data(), nullptr, nullptr);
    conv2d_backward_cpu(ctx, sh, d.x.data(), d.w.data(), d.dy.data(), nullptr, d.dw.data(), nullptr);
    conv2d_backward_cpu(ctx, sh, d.x.data(), d.w.data(), d.dy.data(), nullptr, nullptr, d.db.data());
    CHECK(compare(d.dx, dx, test::kFastCpuVsReference) == "");
    CHECK(compare(d.dw, dw, test::kFastCpuVsReference) == "");
    CHECK(compare(d.db, db, test::kFastCpuVsReference) == "");
  }
}

TEST_CASE("conv2d fast cpu works without a workspace and repeats bit for bit", "[cpu]") {
  ExecContext bare;  // no workspace: the op allocates its own scratch
  bare.num_threads = 2;
  ExecContext ctx = ExecContext::cpu(2);
  Conv2dShape sh = Conv2dShape::make(5, 6, 9, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2);
  ConvData a(sh, 3), b(sh, 3), ref(sh, 3);
  conv2d_forward_reference<float>(ctx, sh, ref.x.data(), ref.w.data(), ref.b.data(), ref.y.data());
  conv2d_backward_reference<float>(ctx, sh, ref.x.data(), ref.w.data(), ref.dy.data(), ref.dx.data(), ref.dw.data(),
                                   ref.db.data());
  conv2d_forward_cpu(bare, sh, a.x.data(), a.w.data(), a.b.data(), a.y.data());
  conv2d_backward_cpu(bare, sh, a.x.data(), a.w.data(), a.dy.data(), a.dx.data(), a.dw.data(), a.db.data());
  CHECK(compare(a.y, ref.y, test::kFastCpuVsReference) == "");
  CHECK(compare(a.dx, ref.dx, test::kFastCpuVsReference) == "");
  CHECK(compare(a.dw, ref.dw, test::kFastCpuVsReference) == "");
  CHECK(compare(a.db, ref.db, test::kFastCpuVsReference) == "");
  conv2d_forward_cpu(ctx, sh, b.x.data(), b.w.data(), b.b.data(), b.y.data());
  conv2d_backward_cpu(ctx, sh, b.x.data(), b.w.data(), b.dy.data(), b.dx.data(), b.dw.data(), b.db.data());
  CHECK(compare(b.y, a.y, test::kExact) == "");
  CHECK(compare(b.dx, a.dx, test::kExact) == "");
  CHECK(compare(b.dw, a.dw, test::kExact) == "");
  CHECK(compare(b.db, a.db, test::kExact) == "");
}

// The Fashion-MNIST CNN of the product target at batch 64; run with: test_ops "[bench]"
TEST_CASE("conv2d fast cpu benchmark on the Fashion-MNIST layers", "[.][bench]") {
  struct Layer {
    const char* name;
    Conv2dShape sh;
    bool needs_dx;  // the first layer never needs dx
  };
  const Layer layers[] = {{"conv 1->32 3x3 28x28", Conv2dShape::make(64, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1), false},
                          {"conv 32->64 3x3 14x14", Conv2dShape::make(64, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1), true}};
  for (int threads : {1, 0})  // one thread, then all cores
    for (const Layer& l : layers) {
      ExecContext ctx = ExecContext::cpu(threads);
      ConvData d(l.sh, 1);
      double fwd = test::best_of_ms([&] { conv2d_forward_cpu(ctx, l.sh, d.x.data(), d.w.data(), d.b.data(), d.y.data()); });
      double bwd = test::best_of_ms([&] {
        conv2d_backward_cpu(ctx, l.sh, d.x.data(), d.w.data(), d.dy.data(), l.needs_dx ? d.dx.data() : nullptr,
                            d.dw.data(), d.db.data());
      });
      const double f = l.sh.flops_forward(), fb = f * (l.needs_dx ? 2 : 1);
      WARN(fmt::format("{} ({} threads): forward {:.3f} ms ({:.1f} GFLOP/s), backward{} {:.3f} ms ({:.1f} GFLOP/s)",
                       l.name, ctx.threads(), fwd, f / fwd * 1e-6, l.needs_dx ? "" : " (no dx)", bwd, fb / bwd * 1e-6));
    }
}

// cpu:direct's stride-1 path works on zero-padded wide planes in blocks of 16 outputs with every
// tap per block (and gathers the data gradient from a margin before the plane): shapes whose wide
// planes end anywhere in a block, with channel multipliers, dilation, no padding and padding wider
// than half the window, from 1 to 3 threads, against the float reference.
TEST_CASE("conv2d cpu direct matches the reference on stride-1 one-channel filters of every width", "[cpu]") {
  const Conv2dShape shapes[] = {
      Conv2dShape::make(3, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4),       // mini_xception's last depthwise size
      Conv2dShape::make(2, 4, 5, 13, 12, 3, 3, 1, 1, 1, 1, 1, 1, 4),     // multiplier 3
      Conv2dShape::make(2, 3, 9, 17, 3, 3, 3, 1, 1, 2, 2, 2, 2, 3),      // dilated
      Conv2dShape::make(2, 2, 7, 8, 2, 3, 5, 1, 1, 0, 0, 1, 1, 2),       // no padding, 3x5
      Conv2dShape::make(1, 2, 4, 4, 2, 3, 3, 1, 1, 3, 2, 1, 1, 2),       // padding past the window
      Conv2dShape::make(2, 1, 11, 23, 5, 4, 2, 1, 1, 1, 1, 1, 1, 1),     // C == 1, even window
      Conv2dShape::make(1, 6, 1, 31, 6, 1, 7, 1, 1, 0, 3, 1, 1, 6),      // one row
  };
  for (int threads : {1, 2, 3}) {
    ExecContext ctx = ExecContext::cpu(threads);
    for (const Conv2dShape& sh : shapes) {
      INFO(fmt::format("{} threads, {}", threads, sh.to_string()));
      REQUIRE(conv2d_cpu_direct_can_implement(sh));
      check_against_reference(ctx, sh, 13, conv2d_forward_cpu_direct, conv2d_backward_cpu_direct);
    }
  }
}
