// Conv2d CUDA strategies (implicit GEMM, direct, and the per-shape choice) beyond what the harness
// compares with the reference (test_backend_ops_conv2d.cpp): bitwise repeats, shapes a strategy
// cannot run rejected, and a hidden benchmark on the vgg_fer layers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/conv2d.h"
#include "support/catch.h"
#include "support/conv_operands.h"
#include "support/device_floats.h"
#include "support/quick.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;
using cnn::test::kGpuVsCpu;

namespace {

using cnn::test::DeviceFloats;

using ForwardFn = std::function<void(const ExecContext&, const Conv2dShape&, const float*, const float*,
                                     const float*, float*)>;
using BackwardFn = std::function<void(const ExecContext&, const Conv2dShape&, const float*, const float*,
                                      const float*, float*, float*, float*)>;

struct Strategy {
  const char* name;
  ForwardFn forward;
  BackwardFn backward;
  std::function<bool(const Conv2dShape&)> can_implement;
};

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> all{
      {"auto", conv2d_forward_cuda, conv2d_backward_cuda, [](const Conv2dShape&) { return true; }},
      {"implicit gemm", conv2d_forward_cuda_implicit_gemm, conv2d_backward_cuda_implicit_gemm,
       conv2d_cuda_implicit_gemm_can_implement},
      {"direct", conv2d_forward_cuda_direct, conv2d_backward_cuda_direct, conv2d_cuda_direct_can_implement},
  };
  return all;
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

// Host operands of one conv and the reference results. Large shapes take the reference in double:
// a float sum of ~10^4 products drifts past kGpuVsCpu's atol where the sum cancels to near zero.
struct Reference : test::ConvHostOperands {
  Reference(const Conv2dShape& shape, uint64_t seed, bool in_double = false)
      : ConvHostOperands(shape, seed) {
    const ExecContext cpu = ExecContext::cpu(1);
    if (!in_double) {
      conv2d_forward_reference<float>(cpu, sh, x.data(), w.data(), b.data(), y.data());
      conv2d_backward_reference<float>(cpu, sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
      return;
    }
    const std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
    std::vector<double> yd(y.size()), dxd(dx.size()), dwd(dw.size()), dbd(db.size());
    conv2d_forward_reference<double>(cpu, sh, xd.data(), wd.data(), bd.data(), yd.data());
    conv2d_backward_reference<double>(cpu, sh, xd.data(), wd.data(), dyd.data(), dxd.data(), dwd.data(), dbd.data());
    y = to_float(yd), dx = to_float(dxd), dw = to_float(dwd), db = to_float(dbd);
  }
};

// The same operands and poisoned outputs on the GPU.
struct DeviceConv {
  DeviceFloats x, w, b, dy, y, dx, dw, db;
  DeviceConv(const Reference& r, int64_t offset = 0)
      : x(r.x, offset), w(r.w, offset), b(r.b, offset), dy(r.dy, offset), y(r.y, offset), dx(r.dx, offset),
        dw(r.dw, offset), db(r.db, offset) {
    poison();
  }
  void poison() {
    for (DeviceFloats* d : {&y, &dx, &dw, &db}) d->poison();
  }
};

}  // namespace

TEST_CASE("conv2d cuda strategies repeat bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  for (const Conv2dShape& sh : {Conv2dShape::make(8, 64, 24, 24, 128, 3, 3, 1, 1, 1, 1),
                                Conv2dShape::make(8, 32, 24, 24, 32, 3, 3, 2, 2, 1, 1, 1, 1, 32)}) {
    const Reference r(sh, 3);
    for (const Strategy& s : strategies()) {
      if (!s.can_implement(sh)) continue;
      INFO(fmt::format("{}: {}", s.name, sh.to_string()));
      std::vector<float> first[4];
      for (int run = 0; run < 2; ++run) {
        DeviceConv d(r);
        s.forward(cuda.ctx(), sh, d.x.data(), d.w.data(), d.b.data(), d.y.data());
        s.backward(cuda.ctx(), sh, d.x.data(), d.w.data(), d.dy.data(), d.dx.data(), d.dw.data(), d.db.data());
        cuda.synchronize();
        const std::vector<float> got[4] = {d.y.get(), d.dx.get(), d.dw.get(), d.db.get()};
        for (int i = 0; i < 4; ++i) {
          if (run == 0) first[i] = got[i];
          else CHECK(compare(got[i], first[i], test::kExact) == "");
        }
      }
    }
  }
}

TEST_CASE("conv2d cuda strategies reject what they cannot run", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Conv2dShape dense = Conv2dShape::make(1, 16, 8, 8, 4, 3, 3);  // 16 x 3 x 3 = 144 taps a filter
  CHECK_FALSE(conv2d_cuda_direct_can_implement(dense));
  CHECK(conv2d_cuda_direct_can_implement(Conv2dShape::make(1, 4, 8, 8, 8, 3, 3, 1, 1, 0, 0, 1, 1, 4)));
  CHECK(conv2d_cuda_direct_can_implement(Conv2dShape::make(1, 9, 8, 8, 4, 3, 3)));    // 81 taps
  CHECK(conv2d_cuda_direct_can_implement(Conv2dShape::make(1, 64, 8, 8, 4, 1, 1)));   // 64 taps
  CHECK_FALSE(conv2d_cuda_direct_can_implement(Conv2dShape::make(1, 1, 16, 16, 4, 11, 11)));  // 121 taps
  CHECK(conv2d_cuda_implicit_gemm_can_implement(dense));
  DeviceFloats x(std::vector<float>(1024, 1.0f)), w(std::vector<float>(576, 1.0f)), y(std::vector<float>(256));
  CHECK_THROWS_AS(conv2d_forward_cuda_direct(cuda.ctx(), dense, x.data(), w.data(), nullptr, y.data()), Error);
  Conv2dShape wrong = dense;
  wrong.P = 8;
  CHECK_THROWS_AS(conv2d_forward_cuda(cuda.ctx(), wrong, x.data(), w.data(), nullptr, y.data()), Error);
  CHECK_THROWS_AS(conv2d_forward_cuda_implicit_gemm(cuda.ctx(), dense, x.data(), w.data(), nullptr, y.data()), Error);
}

// The vgg_fer conv layers at batch 64; run with: test_ops "[bench]". The "[gpu]" filter selects it
// too (hidden cases match an explicit tag), so the sanitizer job runs it, with CNN_TEST_QUICK.
TEST_CASE("conv2d cuda benchmark on the vgg_fer layers", "[.][gpu][bench]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  struct Layer {
    int64_t C, K, HW;
  };
  const Layer layers[] = {{1, 64, 40},    {64, 64, 40},   {64, 128, 20},  {128, 128, 20},
                          {128, 256, 10}, {256, 256, 10}, {256, 512, 5},  {512, 512, 5}};
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  const cudaStream_t stream = static_cast<cudaStream_t>(cuda.ctx().cuda_stream);
  // Median of 20 timed runs after 3 warm-ups, in ms; under CNN_TEST_QUICK (instrumented runs) one
  // timed run after one warm-up: every kernel still runs, no figure is a measurement.
  const int warmups = test::quick() ? 1 : 3, timed = test::quick() ? 1 : 20;
  // Batch 64; 2 under CNN_TEST_QUICK (each strategy takes the same kernels on fewer tiles: at 64,
  // one layer's strategies outlasted 100 s under racecheck).
  const int64_t batch = test::quick() ? 2 : 64;
  auto median_ms = [&](const std::function<void()>& f) {
    for (int i = 0; i < warmups; ++i) f();
    std::vector<float> ms(static_cast<size_t>(timed));
    for (float& t : ms) {
      CUDA_CHECK(cudaEventRecord(start, stream));
      f();
      CUDA_CHECK(cudaEventRecord(stop, stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    }
    std::sort(ms.begin(), ms.end());
    return 0.5 * (ms[(ms.size() - 1) / 2] + ms[ms.size() / 2]);
  };
  for (const Layer& l : layers) {
    const Conv2dShape sh = Conv2dShape::make(batch, l.C, l.HW, l.HW, l.K, 3, 3, 1, 1, 1, 1);
    const bool needs_dx = l.C > 1;  // the first layer never needs dx
    DeviceFloats x(test::random_floats(sh.N * sh.C * sh.H * sh.W, 1)), w(test::random_floats(sh.weight_numel(), 2));
    DeviceFloats b(test::random_floats(sh.K, 3)), dy(test::random_floats(sh.N * sh.K * sh.P * sh.Q, 4));
    DeviceFloats y(std::vector<float>(sh.N * sh.K * sh.P * sh.Q)), dx(std::vector<float>(sh.N * sh.C * sh.H * sh.W));
    DeviceFloats dw(std::vector<float>(sh.weight_numel())), db(std::vector<float>(sh.K));
    for (const Strategy& s : strategies()) {
      if (!s.can_implement(sh)) continue;
      const double fwd = median_ms([&] { s.forward(cuda.ctx(), sh, x.data(), w.data(), b.data(), y.data()); });
      const double bwd = median_ms([&] {
        s.backward(cuda.ctx(), sh, x.data(), w.data(), dy.data(), needs_dx ? dx.data() : nullptr, dw.data(),
                   db.data());
      });
      const double t_dx = median_ms(
          [&] { s.backward(cuda.ctx(), sh, x.data(), w.data(), dy.data(), dx.data(), nullptr, nullptr); });
      const double t_dw = median_ms(
          [&] { s.backward(cuda.ctx(), sh, x.data(), w.data(), dy.data(), nullptr, dw.data(), nullptr); });
      const double t_db = median_ms(
          [&] { s.backward(cuda.ctx(), sh, x.data(), w.data(), dy.data(), nullptr, nullptr, db.data()); });
      const double f = sh.flops_forward(), fb = f * (needs_dx ? 2 : 1);
      WARN(fmt::format("conv {}->{} {}x{} N={} [{}]: forward {:.3f} ms ({:.2f} TFLOP/s), backward{} {:.3f} ms "
                       "({:.2f} TFLOP/s); alone: dx {:.3f} ms ({:.2f}), dw {:.3f} ms ({:.2f}), db {:.3f} ms",
                       l.C, l.K, l.HW, l.HW, batch, s.name, fwd, f / fwd * 1e-9, needs_dx ? "" : " (no dx)", bwd,
                       fb / bwd * 1e-9, t_dx, f / t_dx * 1e-9, t_dw, f / t_dw * 1e-9, t_db));
    }
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
}
