// Pooling CUDA beyond what the harness compares with the reference (test_backend_ops.cpp): NaN
// propagation and the argmax rule of max pooling, and a hidden benchmark.
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/pool2d.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;
using cnn::test::kGpuVsCpu;

using cnn::test::DeviceFloats;

TEST_CASE("pool2d cuda max pooling propagates NaN and routes its gradient like the cpu", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  for (int64_t R : {2, 3, 7}) {
    const auto sh =
        Pool2dShape::make(PoolKind::max, 2, 2, 7, 7, R, R, 2, 2, static_cast<int>(R / 2), static_cast<int>(R / 2));
    std::vector<float> x = test::random_floats(2 * 2 * 7 * 7, 900 + R);
    x[3] = std::nanf("");
    x[60] = std::nanf("");
    x[61] = std::nanf("");
    const ExecContext cpu = ExecContext::cpu(1);
    const int64_t ny = sh.N * sh.C * sh.P * sh.Q;
    const std::vector<float> dy = test::random_floats(static_cast<size_t>(ny), 5);
    std::vector<float> y_ref(ny), dx_ref(x.size());
    run_op(Backend::cpu, Pool2dForward{&cpu, sh, x.data(), y_ref.data()});
    run_op(Backend::cpu, Pool2dBackward{&cpu, sh, x.data(), y_ref.data(), dy.data(), dx_ref.data()});
    DeviceFloats dx_in(x), ddy(dy), y = DeviceFloats::poisoned(ny), dx = DeviceFloats::poisoned(x.size());
    run_op(Backend::cuda, Pool2dForward{&cuda.ctx(), sh, dx_in.data(), y.data()});
    run_op(Backend::cuda, Pool2dBackward{&cuda.ctx(), sh, dx_in.data(), y.data(), ddy.data(), dx.data()});
    cuda.synchronize();
    const std::vector<float> y_gpu = y.get(), dx_gpu = dx.get();
    for (size_t i = 0; i < y_gpu.size(); ++i) {
      INFO("R=" << R << " output " << i);
      CHECK(std::isnan(y_gpu[i]) == std::isnan(y_ref[i]));
      if (!std::isnan(y_ref[i])) CHECK(y_gpu[i] == y_ref[i]);
    }
    CHECK(compare(dx_gpu, dx_ref, kGpuVsCpu) == "");
  }
}

TEST_CASE("pool2d and relu cuda benchmark on fer-sized activations", "[.][bench]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  auto time_ms = [&](auto&& f) { return test::mean_gpu_ms(cuda.ctx(), f); };
  struct Bench {
    PoolKind kind;
    int64_t N, C, H, W, R, stride, pad;
  };
  for (const Bench& b :
       {Bench{PoolKind::max, 64, 64, 48, 48, 2, 2, 0}, Bench{PoolKind::max, 256, 128, 24, 24, 3, 2, 1},
        Bench{PoolKind::avg, 256, 512, 6, 6, 6, 1, 0}, Bench{PoolKind::avg, 64, 64, 48, 48, 3, 1, 1}}) {
    const auto sh = Pool2dShape::make(b.kind, b.N, b.C, b.H, b.W, b.R, b.R, static_cast<int>(b.stride),
                                      static_cast<int>(b.stride), static_cast<int>(b.pad), static_cast<int>(b.pad));
    const int64_t nx = b.N * b.C * b.H * b.W, ny = b.N * b.C * sh.P * sh.Q;
    DeviceFloats x(test::random_floats(static_cast<size_t>(nx), 1)),
        dy(test::random_floats(static_cast<size_t>(ny), 2));
    DeviceFloats y = DeviceFloats::poisoned(ny), dx = DeviceFloats::poisoned(nx);
    const double fwd = time_ms([&] { run_op(Backend::cuda, Pool2dForward{&cuda.ctx(), sh, x.data(), y.data()}); });
    const double bwd = time_ms([&] { run_op(Backend::cuda, Pool2dBackward{&cuda.ctx(), sh, x.data(), y.data(), dy.data(), dx.data()}); });
    const double mx = nx * 4.0 / 1e6, my = ny * 4.0 / 1e6;
    WARN(sh.to_string() << ": forward " << fwd << " ms (" << (mx + my) / fwd << " GB/s), backward " << bwd << " ms ("
                        << (2 * mx + 2 * my) / bwd << " GB/s)");
  }
}
