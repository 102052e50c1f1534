// Pooling CUDA beyond what the harness compares with the reference (test_backend_ops.cpp): NaN
// propagation and the argmax rule of max pooling, the tiled max backward's bits, and a hidden
// benchmark (f32 NCHW, bf16 channels-last).
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/activation.h"
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

// Overlapping max windows: the forward and every f32 max backward kernel (the automatic choice, the tiled kernel with
// its argmax masks in shared memory, the plain gather; windows over 32 values always gather) gives
// exactly the cpu's bits on shapes spanning several tiles with ragged edges, packed small planes (a
// last block with fewer), gaps between windows, non-square windows and strides; values on a coarse
// grid so windows tie, and NaNs. 17M two-value planes (256 a block) are more than 65535 blocks'
// worth: the tiled kernel's grid-stride loop over planes.
TEST_CASE("pool2d cuda max backward over overlapping windows gives the cpu's bits", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  struct Case {
    int64_t N, C, H, W, R, S, sh, sw, ph, pw;
  };
  for (const Case& c : {Case{2, 3, 37, 45, 3, 3, 1, 1, 1, 1}, Case{2, 3, 37, 45, 3, 3, 2, 2, 1, 1},
                        Case{4, 5, 7, 7, 3, 3, 1, 1, 1, 1}, Case{3, 29, 7, 7, 3, 3, 1, 1, 1, 1},
                        Case{3, 2, 14, 14, 3, 3, 2, 2, 0, 0}, Case{2, 2, 20, 20, 5, 5, 1, 1, 2, 2},
                        Case{2, 2, 19, 23, 2, 2, 3, 3, 0, 0}, Case{1, 2, 33, 70, 3, 2, 2, 1, 1, 0},
                        Case{1, 2, 150, 9, 3, 3, 2, 2, 1, 1}, Case{1, 1, 40, 40, 16, 15, 1, 1, 0, 0},
                        Case{1, 1, 40, 40, 16, 16, 1, 1, 0, 0}, Case{1, 17000000, 1, 2, 1, 2, 1, 1, 0, 0}}) {
    const auto sh = Pool2dShape::make(PoolKind::max, c.N, c.C, c.H, c.W, c.R, c.S, c.sh, c.sw, c.ph, c.pw);
    std::vector<float> x = test::random_floats(static_cast<size_t>(c.N * c.C * c.H * c.W), 77);
    for (float& v : x) v = std::round(v * 3.0f) / 3.0f;  // 7 values: many windows tie
    if (x.size() > 100) x[17] = x[99] = std::nanf("");
    const int64_t ny = sh.N * sh.C * sh.P * sh.Q;
    const std::vector<float> dy = test::random_floats(static_cast<size_t>(ny), 78);
    std::vector<float> y_ref(static_cast<size_t>(ny)), dx_ref(x.size());
    run_op(Backend::cpu, Pool2dForward{&cpu, sh, x.data(), y_ref.data()});
    run_op(Backend::cpu, Pool2dBackward{&cpu, sh, x.data(), y_ref.data(), dy.data(), dx_ref.data()});
    DeviceFloats dx_in(x), dy_d(dy), y_d(y_ref);
    {  // The forward too (3x3 windows: the unrolled kernel), bit for bit against the reference's
       // row-major scan, ties of +0 and -0 and NaNs included. The cpu row (y_ref) is separable and
       // may keep the other zero of a tie (pool2d_cpu.cpp): against it, equal values.
      std::vector<float> y_scan(static_cast<size_t>(ny));
      pool2d_forward_reference(cpu, sh, x.data(), y_scan.data());
      DeviceFloats y_gpu = DeviceFloats::poisoned(ny);
      run_op(Backend::cuda, Pool2dForward{&cuda.ctx(), sh, dx_in.data(), y_gpu.data()});
      cuda.synchronize();
      const std::vector<float> got = y_gpu.get();
      size_t differ = 0, unequal = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        differ += std::memcmp(&got[i], &y_scan[i], sizeof(float)) != 0;
        unequal += !(got[i] == y_ref[i] || (std::isnan(got[i]) && std::isnan(y_ref[i])));
      }
      INFO(sh.to_string() << ", forward");
      CHECK(differ == 0);
      CHECK(unequal == 0);
    }
    for (MaxPoolBackwardKernel kernel :
         {MaxPoolBackwardKernel::automatic, MaxPoolBackwardKernel::tiled, MaxPoolBackwardKernel::gather}) {
      INFO(sh.to_string() << ", kernel " << static_cast<int>(kernel) << " (0 automatic, 1 tiled, 2 gather)");
      DeviceFloats dx = DeviceFloats::poisoned(x.size());
      pool2d_backward_cuda_f32_with(Pool2dBackward{&cuda.ctx(), sh, dx_in.data(), y_d.data(), dy_d.data(), dx.data()},
                                    kernel);
      cuda.synchronize();
      const std::vector<float> dx_gpu = dx.get();
      REQUIRE(dx_gpu.size() == dx_ref.size());
      size_t differ = 0, first = 0;
      for (size_t i = 0; i < dx_gpu.size(); ++i)
        if (std::memcmp(&dx_gpu[i], &dx_ref[i], sizeof(float)) != 0 && differ++ == 0) first = i;
      INFO("first differing input " << first << ": gpu " << dx_gpu[first] << ", cpu " << dx_ref[first]);
      CHECK(differ == 0);
    }
  }
}

// A tensor of the logical shape s on the GPU, values in [-1, 1] in storage order (bf16: channels-last).
static Tensor random_tensor(const Shape& s, DType t, uint64_t seed) {
  const std::vector<float> v = test::random_floats(static_cast<size_t>(s.numel()), seed);
  if (t == DType::f32) return Tensor::from_vector(s, v).to(Device::cuda);
  Tensor host = Tensor::empty(s, Device::cpu, "bench", DType::bf16);
  for (size_t i = 0; i < v.size(); ++i) static_cast<bf16*>(host.raw())[i] = to_bf16(v[i]);
  return host.to(Device::cuda);
}

TEST_CASE("pool2d and relu cuda benchmark on fer-sized activations", "[.][bench]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  auto time_ms = [&](auto&& f) { return test::mean_gpu_ms(cuda.ctx(), f); };
  struct Bench {
    PoolKind kind;
    int64_t N, C, H, W, R, stride, pad;
  };
  for (DType t : {DType::f32, DType::bf16}) {
    const double bytes = static_cast<double>(dtype_size(t));
    // Global average pooling (R = H) at 48x48 and at mini_xception's 3x3 x 7 channels among them.
    for (const Bench& b :
         {Bench{PoolKind::max, 64, 64, 48, 48, 2, 2, 0}, Bench{PoolKind::max, 256, 128, 24, 24, 3, 2, 1},
          Bench{PoolKind::avg, 64, 64, 48, 48, 3, 1, 1}, Bench{PoolKind::avg, 64, 64, 48, 48, 48, 48, 0},
          Bench{PoolKind::avg, 256, 512, 6, 6, 6, 6, 0}, Bench{PoolKind::avg, 256, 7, 3, 3, 3, 3, 0},
          // GoogLeNet b64's max pools (overlapping windows): the 3x3/2 ones between stages, and the
          // inception blocks' 3x3/1 ones at each size.
          Bench{PoolKind::max, 64, 64, 112, 112, 3, 2, 1}, Bench{PoolKind::max, 64, 192, 56, 56, 3, 2, 1},
          Bench{PoolKind::max, 64, 480, 28, 28, 3, 2, 1}, Bench{PoolKind::max, 64, 832, 14, 14, 3, 2, 1},
          Bench{PoolKind::max, 64, 192, 28, 28, 3, 1, 1}, Bench{PoolKind::max, 64, 480, 14, 14, 3, 1, 1},
          Bench{PoolKind::max, 64, 832, 7, 7, 3, 1, 1}}) {
      const auto sh = Pool2dShape::make(b.kind, b.N, b.C, b.H, b.W, b.R, b.R, static_cast<int>(b.stride),
                                        static_cast<int>(b.stride), static_cast<int>(b.pad), static_cast<int>(b.pad));
      const Shape in{b.N, b.C, b.H, b.W}, out{b.N, b.C, sh.P, sh.Q};
      Tensor x = random_tensor(in, t, 1), dy = random_tensor(out, t, 2);
      Tensor y = Tensor::empty(out, Device::cuda, "y", t), dx = Tensor::empty(in, Device::cuda, "dx", t);
      run_op(Backend::cuda, Pool2dForward{&cuda.ctx(), sh, x.view(), y.view()});  // y for max backward
      const double fwd = time_ms([&] { run_op(Backend::cuda, Pool2dForward{&cuda.ctx(), sh, x.view(), y.view()}); });
      const double bwd = time_ms([&] {
        run_op(Backend::cuda, Pool2dBackward{&cuda.ctx(), sh, x.view(), y.view(), dy.view(), dx.view()});
      });
      const double mx = in.numel() * bytes / 1e6, my = out.numel() * bytes / 1e6;
      const double bwd_mb = b.kind == PoolKind::max ? 2 * mx + 2 * my : mx + my;  // avg reads neither x nor y
      WARN(to_string(t) << " " << sh.to_string() << ": forward " << fwd << " ms (" << (mx + my) / fwd
                        << " GB/s), backward " << bwd << " ms (" << bwd_mb / bwd << " GB/s)");
      if (t == DType::f32 && b.kind == PoolKind::max)  // each f32 max backward kernel, same operands
        for (MaxPoolBackwardKernel kernel : {MaxPoolBackwardKernel::tiled, MaxPoolBackwardKernel::gather}) {
          const double ms = time_ms([&] {
            pool2d_backward_cuda_f32_with(
                Pool2dBackward{&cuda.ctx(), sh, x.view(), y.view(), dy.view(), dx.view()}, kernel);
          });
          WARN("  f32 backward, " << (kernel == MaxPoolBackwardKernel::tiled ? "tiled" : "gather") << " kernel: "
                                  << ms << " ms (" << bwd_mb / ms << " GB/s)");
        }
    }
    const Shape act{64, 64, 48, 48};
    Tensor x = random_tensor(act, t, 3), dy = random_tensor(act, t, 4), y = Tensor::empty(act, Device::cuda, "y", t);
    const ActivationParams relu{ActivationKind::relu, 0.0f};
    const int64_t n = act.numel();
    const double fwd =
        time_ms([&] { run_op(Backend::cuda, ActivationForward{&cuda.ctx(), relu, n, x.view(), y.view()}); });
    const double bwd = time_ms([&] {
      run_op(Backend::cuda, ActivationBackward{&cuda.ctx(), relu, n, x.view(), nullptr, dy.view(), y.view()});
    });
    const double mb = n * bytes / 1e6;
    WARN(to_string(t) << " relu " << act.to_string() << ": forward " << fwd << " ms (" << 2 * mb / fwd
                      << " GB/s), backward " << bwd << " ms (" << 3 * mb / bwd << " GB/s)");
  }
}
