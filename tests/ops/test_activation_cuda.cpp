// Activation CUDA beyond what the harness compares with the reference (test_backend_ops.cpp):
// backward reads only the operand its kind needs, so the other may be null.
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
    run_op(Backend::cpu, ActivationForward{&cpu, prm, n, x.data(), y_ref.data()});
    run_op(Backend::cpu, ActivationBackward{&cpu, prm, n, x.data(), y_ref.data(), dy.data(), dx_ref.data()});
    DeviceFloats dx_in(x), dy_in(y_ref), g(dy), out = DeviceFloats::poisoned(n);
    run_op(Backend::cuda, ActivationBackward{&cuda.ctx(), prm, n, needs_x ? dx_in.data() : nullptr, needs_x ? nullptr : dy_in.data(),
                             g.data(), out.data()});
    cuda.synchronize();
    CHECK(compare(out.get(), dx_ref, kGpuVsCpu) == "");
  }
}

TEST_CASE("bias and activation forward on cuda matches the cpu row, vector and scalar paths", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext cpu = ExecContext::cpu(1);
  struct Dims {
    int64_t outer, channels, inner, offset;  // offset: floats into the allocation (1: unaligned)
  };
  // inner % 4 == 0 and aligned: the vector kernel; odd inner or offset 1: the scalar one.
  for (const Dims d : {Dims{2, 3, 8, 0}, Dims{2, 3, 8, 1}, Dims{2, 5, 49, 0}, Dims{64, 192, 784, 0}, Dims{1, 1, 1, 0}}) {
    const int64_t n = d.outer * d.channels * d.inner;
    const std::vector<float> y0 = test::random_floats(n, 41, -3.0f, 3.0f);
    const std::vector<float> b = test::random_floats(d.channels, 42, -1.0f, 1.0f);
    DeviceFloats db(b);
    for (ActivationKind kind : kAllKinds)
      for (bool with_bias : {true, false}) {
        INFO(to_string(kind) << " " << d.outer << "x" << d.channels << "x" << d.inner << " offset " << d.offset
                             << (with_bias ? " bias" : ""));
        const ActivationParams prm{kind, 0.2f};
        std::vector<float> want = y0;
        run_op(Backend::cpu, BiasActivationForward{&cpu, prm, d.outer, d.channels, d.inner,
                                                   with_bias ? ConstView(b.data()) : ConstView(nullptr), want.data()});
        DeviceFloats y(y0, d.offset);
        run_op(Backend::cuda, BiasActivationForward{&cuda.ctx(), prm, d.outer, d.channels, d.inner,
                                                    with_bias ? ConstView(db.data()) : ConstView(nullptr), y.data()});
        cuda.synchronize();
        // relu and leaky_relu are exact in both; the others go through expf/tanhf.
        const bool exact = kind == ActivationKind::relu || kind == ActivationKind::leaky_relu;
        CHECK(compare(y.get(), want, exact ? test::Tolerance{0, 0} : kGpuVsCpu) == "");
      }
  }
}
