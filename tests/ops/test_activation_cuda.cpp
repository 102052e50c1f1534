// Activation CUDA kernels against the CPU fast path: every kind, odd sizes, n not a multiple
// of 4, misaligned pointers (the scalar path), and in-place forward and backward.
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/activation.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;
using cnn::test::kGpuVsCpu;

namespace {

using cnn::test::DeviceFloats;
const ActivationKind kAllKinds[] = {ActivationKind::relu, ActivationKind::leaky_relu, ActivationKind::elu,
                                    ActivationKind::sigmoid, ActivationKind::tanh};

}  // namespace

TEST_CASE("activation cuda matches the cpu over odd sizes and misaligned pointers", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext& gpu = cuda.ctx();
  const ExecContext cpu = ExecContext::cpu(1);
  for (ActivationKind kind : kAllKinds) {
    const ActivationParams prm{kind, 0.2f};
    for (int64_t n : {1, 3, 4, 5, 7, 64, 1001, 4096, 65537}) {
      for (int64_t offset : {0, 1}) {
        INFO(to_string(kind) << " n=" << n << " offset=" << offset);
        std::vector<float> x = test::random_floats(static_cast<size_t>(n), 100 + n, -4.0f, 4.0f);
        x[0] = 0.0f;  // the kink: every kind must take the same side as the cpu
        const std::vector<float> dy = test::random_floats(static_cast<size_t>(n), 200 + n);
        std::vector<float> y_ref(x.size()), dx_ref(x.size());
        activation_forward_cpu({&cpu, prm, n, x.data(), y_ref.data()});
        activation_backward_cpu({&cpu, prm, n, x.data(), y_ref.data(), dy.data(), dx_ref.data()});

        DeviceFloats dx_in(x, offset), ddy(dy, offset);
        DeviceFloats dyv = DeviceFloats::poisoned(n, offset), ddx = DeviceFloats::poisoned(n, offset);
        activation_forward_cuda({&gpu, prm, n, dx_in.data(), dyv.data()});
        activation_backward_cuda({&gpu, prm, n, dx_in.data(), dyv.data(), ddy.data(), ddx.data()});
        cuda.synchronize();
        CHECK(compare(dyv.get(), y_ref, kGpuVsCpu) == "");
        CHECK(compare(ddx.get(), dx_ref, kGpuVsCpu) == "");
      }
    }
  }
}

TEST_CASE("activation cuda works in place: y over x and dx over dy", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  const int64_t n = 10003;
  for (ActivationKind kind : kAllKinds) {
    INFO(to_string(kind));
    const ActivationParams prm{kind, 0.5f};
    const std::vector<float> x = test::random_floats(n, 7, -3.0f, 3.0f);
    const std::vector<float> dy = test::random_floats(n, 8);
    std::vector<float> y_ref(n), dx_ref(n);
    activation_forward_cpu({&cpu, prm, n, x.data(), y_ref.data()});
    activation_backward_cpu({&cpu, prm, n, x.data(), y_ref.data(), dy.data(), dx_ref.data()});

    DeviceFloats keep_x(x), y(x), g(dy);
    activation_forward_cuda({&cuda.ctx(), prm, n, y.data(), y.data()});
    activation_backward_cuda({&cuda.ctx(), prm, n, keep_x.data(), y.data(), g.data(), g.data()});
    cuda.synchronize();
    CHECK(compare(y.get(), y_ref, kGpuVsCpu) == "");
    CHECK(compare(g.get(), dx_ref, kGpuVsCpu) == "");
  }
}

TEST_CASE("activation cuda backward reads only the operand its kind needs", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  const int64_t n = 1000;
  const std::vector<float> x = test::random_floats(n, 9, -3.0f, 3.0f), dy = test::random_floats(n, 10);
  for (ActivationKind kind :
       {ActivationKind::relu, ActivationKind::leaky_relu, ActivationKind::sigmoid, ActivationKind::tanh}) {
    INFO(to_string(kind));
    const bool needs_x = kind == ActivationKind::relu || kind == ActivationKind::leaky_relu;
    const ActivationParams prm{kind, 0.1f};
    std::vector<float> y_ref(n), dx_ref(n);
    activation_forward_cpu({&cpu, prm, n, x.data(), y_ref.data()});
    activation_backward_cpu({&cpu, prm, n, x.data(), y_ref.data(), dy.data(), dx_ref.data()});
    DeviceFloats dx_in(x), dy_in(y_ref), g(dy), out = DeviceFloats::poisoned(n);
    activation_backward_cuda({&cuda.ctx(), prm, n, needs_x ? dx_in.data() : nullptr, needs_x ? nullptr : dy_in.data(),
                             g.data(), out.data()});
    cuda.synchronize();
    CHECK(compare(out.get(), dx_ref, kGpuVsCpu) == "");
  }
}
