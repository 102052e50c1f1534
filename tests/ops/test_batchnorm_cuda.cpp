// Batchnorm CUDA kernels beyond what the harness compares with the reference
// (test_backend_ops_batchnorm.cpp): run-to-run bitwise equality, shapes without batch statistics
// rejected, and a hidden benchmark.
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/batchnorm.h"
#include "support/batchnorm_shape.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;
using cnn::test::kGpuVsCpu;

using cnn::test::make_batchnorm_shape;

namespace {

using cnn::test::DeviceFloats;
struct Case {
  int64_t N, C, H, W;
  float offset;  // added to x: a large channel mean tests the shifted statistics
};

struct Outputs {
  std::vector<float> y, running_mean, running_var, save_mean, save_inv_std, dx, dgamma, dbeta, y_infer;
};

struct Inputs {
  std::vector<float> x, gamma, beta, dy, rm0, rv0;
};

Inputs make_inputs(const Case& c) {
  const size_t n = static_cast<size_t>(c.N * c.C * c.H * c.W), C = static_cast<size_t>(c.C);
  Inputs in;
  in.x = test::random_floats(n, 61 + n, -1.5f, 2.5f);
  for (float& v : in.x) v += c.offset;
  in.gamma = test::random_floats(C, 62, 0.5f, 1.5f);
  in.beta = test::random_floats(C, 63);
  in.dy = test::random_floats(n, 64 + n);
  in.rm0 = test::random_floats(C, 65);
  in.rv0 = test::random_floats(C, 66, 0.5f, 2.0f);
  return in;
}
// The GPU's own save_mean/save_inv_std feed its backward, as in training.
Outputs run_gpu(CudaContext& cuda, const BatchnormShape& sh, const Inputs& in, int64_t offset) {
  const int64_t n = static_cast<int64_t>(in.x.size()), C = sh.C;
  DeviceFloats x(in.x, offset), gamma(in.gamma), beta(in.beta), dy(in.dy, offset), rm(in.rm0), rv(in.rv0);
  DeviceFloats rm_infer(in.rm0), rv_infer(in.rv0);
  DeviceFloats y = DeviceFloats::poisoned(n, offset), sm = DeviceFloats::poisoned(C), sis = DeviceFloats::poisoned(C);
  DeviceFloats dx = DeviceFloats::poisoned(n, offset), dg = DeviceFloats::poisoned(C), db = DeviceFloats::poisoned(C);
  DeviceFloats yi = DeviceFloats::poisoned(n, offset);
  const ExecContext& ctx = cuda.ctx();
  run_op(Backend::cuda, BatchnormForwardTrain{&ctx, sh, x.data(), gamma.data(), beta.data(), y.data(), rm.data(), rv.data(), sm.data(),
                               sis.data()});
  run_op(Backend::cuda, BatchnormBackward{&ctx, sh, x.data(), gamma.data(), sm.data(), sis.data(), dy.data(), dx.data(), dg.data(),
                          db.data()});
  run_op(Backend::cuda, BatchnormForwardInfer{&ctx, sh, x.data(), gamma.data(), beta.data(), rm_infer.data(), rv_infer.data(),
                               yi.data()});
  cuda.synchronize();
  return Outputs{y.get(), rm.get(), rv.get(), sm.get(), sis.get(), dx.get(), dg.get(), db.get(), yi.get()};
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("batchnorm cuda repeats bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const BatchnormShape sh = make_batchnorm_shape(32, 16, 24, 24);
  const Inputs in = make_inputs({32, 16, 24, 24, 3.0f});
  const Outputs a = run_gpu(cuda, sh, in, 0), b = run_gpu(cuda, sh, in, 0);
  CHECK(bitwise_equal(a.y, b.y));
  CHECK(bitwise_equal(a.running_var, b.running_var));
  CHECK(bitwise_equal(a.save_inv_std, b.save_inv_std));
  CHECK(bitwise_equal(a.dx, b.dx));
  CHECK(bitwise_equal(a.dgamma, b.dgamma));
  CHECK(bitwise_equal(a.dbeta, b.dbeta));
}

TEST_CASE("batchnorm cuda rejects shapes without batch statistics", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  DeviceFloats v(std::vector<float>(4, 1.0f));
  CHECK_THROWS_AS(run_op(Backend::cuda, BatchnormForwardTrain{&cuda.ctx(), make_batchnorm_shape(1, 4, 1, 1), v.data(), v.data(), v.data(),
                                               v.data(), v.data(), v.data(), v.data(), v.data()}),
                  Error);
}

TEST_CASE("batchnorm, pooling and relu cuda benchmark on fer-sized activations", "[.][bench]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  auto time_ms = [&](auto&& f) { return test::mean_gpu_ms(cuda.ctx(), f); };
  for (const Case& c :
       {Case{64, 64, 48, 48, 0}, Case{256, 128, 24, 24, 0}, Case{256, 512, 3, 3, 0}, Case{256, 1024, 1, 1, 0}}) {
    const BatchnormShape sh = make_batchnorm_shape(c.N, c.C, c.H, c.W);
    const Inputs in = make_inputs(c);
    const int64_t n = static_cast<int64_t>(in.x.size());
    DeviceFloats x(in.x), gamma(in.gamma), beta(in.beta), dy(in.dy), rm(in.rm0), rv(in.rv0);
    DeviceFloats y = DeviceFloats::poisoned(n), dx = DeviceFloats::poisoned(n), sm = DeviceFloats::poisoned(c.C),
                 sis = DeviceFloats::poisoned(c.C), dg = DeviceFloats::poisoned(c.C), db = DeviceFloats::poisoned(c.C);
    const double fwd = time_ms([&] {
      run_op(Backend::cuda, BatchnormForwardTrain{&cuda.ctx(), sh, x.data(), gamma.data(), beta.data(), y.data(), rm.data(), rv.data(),
                                   sm.data(), sis.data()});
    });
    const double bwd = time_ms([&] {
      run_op(Backend::cuda, BatchnormBackward{&cuda.ctx(), sh, x.data(), gamma.data(), sm.data(), sis.data(), dy.data(), dx.data(),
                              dg.data(), db.data()});
    });
    const double mb = n * 4.0 / 1e6;
    WARN("batchnorm N=" << c.N << " C=" << c.C << " " << c.H << "x" << c.W << ": forward " << fwd << " ms ("
                        << 3 * mb / fwd << " GB/s of 2 reads + 1 write), backward " << bwd << " ms (" << 5 * mb / bwd
                        << " GB/s of 4 reads + 1 write)");
  }
}
