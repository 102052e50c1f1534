// Batchnorm CUDA kernels beyond what the harness compares with the reference
// (test_backend_ops_batchnorm.cpp): run-to-run bitwise equality (f32 NCHW and bf16 channels-last),
// shapes without batch statistics rejected, and hidden benchmarks.
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_context.h"
#include "core/tensor.h"
#include "ops/batchnorm.h"
#include "ops/convert.h"
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

// bf16 channels-last activations on the GPU: an uninitialised one, or `nchw` rounded once.
Tensor bf16_activation(CudaContext& cuda, const BatchnormShape& sh) {
  return Tensor::empty(Shape{sh.N, sh.C, sh.H, sh.W}, Device::cuda, "bf16 activation", DType::bf16);
}
Tensor bf16_activation(CudaContext& cuda, const BatchnormShape& sh, const std::vector<float>& nchw) {
  Tensor t = bf16_activation(cuda, sh);
  DeviceFloats f(nchw);
  run_op(Backend::cuda, ConvertForward{&cuda.ctx(), ActDims{sh.N, sh.C, sh.H, sh.W}, f.data(), Layout::nchw, t.view(),
                                       Layout::nhwc});
  cuda.synchronize();
  return t;
}

// run_gpu with bf16 channels-last activations (the outputs y, dx, y_infer in storage order).
Outputs run_gpu_bf16(CudaContext& cuda, const BatchnormShape& sh, const Inputs& in) {
  const int64_t C = sh.C;
  Tensor x = bf16_activation(cuda, sh, in.x), dy = bf16_activation(cuda, sh, in.dy);
  Tensor y = bf16_activation(cuda, sh), dx = bf16_activation(cuda, sh), yi = bf16_activation(cuda, sh);
  DeviceFloats gamma(in.gamma), beta(in.beta), rm(in.rm0), rv(in.rv0), rm_infer(in.rm0), rv_infer(in.rv0);
  DeviceFloats sm = DeviceFloats::poisoned(C), sis = DeviceFloats::poisoned(C), dg = DeviceFloats::poisoned(C),
               db = DeviceFloats::poisoned(C);
  const ExecContext& ctx = cuda.ctx();
  run_op(Backend::cuda, BatchnormForwardTrain{&ctx, sh, x.view(), gamma.data(), beta.data(), y.view(), rm.data(),
                                              rv.data(), sm.data(), sis.data()});
  run_op(Backend::cuda, BatchnormBackward{&ctx, sh, x.view(), gamma.data(), sm.data(), sis.data(), dy.view(),
                                          dx.view(), dg.data(), db.data()});
  run_op(Backend::cuda, BatchnormForwardInfer{&ctx, sh, x.view(), gamma.data(), beta.data(), rm_infer.data(),
                                              rv_infer.data(), yi.view()});
  cuda.synchronize();
  return Outputs{y.to_vector(), rm.get(), rv.get(), sm.get(), sis.get(), dx.to_vector(), dg.get(), db.get(),
                 yi.to_vector()};
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_bitwise_equal(const Outputs& a, const Outputs& b) {
  CHECK(bitwise_equal(a.y, b.y));
  CHECK(bitwise_equal(a.running_var, b.running_var));
  CHECK(bitwise_equal(a.save_inv_std, b.save_inv_std));
  CHECK(bitwise_equal(a.dx, b.dx));
  CHECK(bitwise_equal(a.dgamma, b.dgamma));
  CHECK(bitwise_equal(a.dbeta, b.dbeta));
  CHECK(bitwise_equal(a.y_infer, b.y_infer));
}

}  // namespace

TEST_CASE("batchnorm cuda repeats bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const BatchnormShape sh = make_batchnorm_shape(32, 16, 24, 24);
  const Inputs in = make_inputs({32, 16, 24, 24, 3.0f});
  check_bitwise_equal(run_gpu(cuda, sh, in, 0), run_gpu(cuda, sh, in, 0));
}

// Several slices of rows per channel group, on the 16-byte path (C = 64; C = 128 in two tiles of
// many slices) and the scalar one (C = 12).
TEST_CASE("batchnorm cuda bf16 channels-last repeats bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  for (const Case& c : {Case{32, 64, 12, 12, 3.0f}, Case{32, 12, 24, 24, 0}, Case{64, 128, 24, 24, 0}}) {
    const BatchnormShape sh = make_batchnorm_shape(c.N, c.C, c.H, c.W);
    const Inputs in = make_inputs(c);
    check_bitwise_equal(run_gpu_bf16(cuda, sh, in), run_gpu_bf16(cuda, sh, in));
  }
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

// Bytes moved: forward (statistics, then normalise) reads x twice and writes y; backward reads x
// and dy twice and writes dx; the phased pair with a fused relu also reads y in backward.
TEST_CASE("batchnorm cuda bf16 channels-last benchmark on fer-sized activations", "[.][bench]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  auto time_ms = [&](auto&& f) { return test::mean_gpu_ms(cuda.ctx(), f); };
  const ActivationParams relu{ActivationKind::relu, 0.0f};
  // vgg_fer-sized, then mini_xception's at batch 32 and 256 (C = 8 at 46x46 up to C = 128 at 6x6).
  for (const Case& c : {Case{64, 64, 48, 48, 0}, Case{640, 64, 48, 48, 0}, Case{256, 128, 24, 24, 0},
                        Case{256, 512, 3, 3, 0}, Case{256, 1024, 1, 1, 0}, Case{256, 7, 48, 48, 0},
                        Case{32, 8, 46, 46, 0}, Case{32, 16, 44, 44, 0}, Case{32, 64, 11, 11, 0},
                        Case{32, 128, 6, 6, 0}, Case{256, 16, 44, 44, 0}, Case{256, 128, 6, 6, 0}}) {
    const BatchnormShape sh = make_batchnorm_shape(c.N, c.C, c.H, c.W);
    const int64_t n = c.N * c.C * c.H * c.W;
    const std::vector<float> xv = test::random_floats(size_t(n), 61, -1.5f, 2.5f);
    Tensor x = bf16_activation(cuda, sh, xv), dy = bf16_activation(cuda, sh, xv);
    Tensor y = bf16_activation(cuda, sh), dx = bf16_activation(cuda, sh);
    DeviceFloats gamma(std::vector<float>(size_t(c.C), 1.0f)), beta(std::vector<float>(size_t(c.C), 0.0f)),
        rm(std::vector<float>(size_t(c.C), 0.0f)), rv(std::vector<float>(size_t(c.C), 1.0f)),
        sm = DeviceFloats::poisoned(c.C), sis = DeviceFloats::poisoned(c.C), dg = DeviceFloats::poisoned(c.C),
        db = DeviceFloats::poisoned(c.C), sums = DeviceFloats::poisoned(4 * (2 * c.C + 1));
    double* stats = reinterpret_cast<double*>(sums.data());
    double* grad_sums = stats + 2 * c.C + 1;
    const ExecContext* ctx = &cuda.ctx();
    const double fwd = time_ms([&] {
      run_op(Backend::cuda, BatchnormForwardTrain{ctx, sh, x.view(), gamma.data(), beta.data(), y.view(), rm.data(),
                                                  rv.data(), sm.data(), sis.data()});
    });
    const double bwd = time_ms([&] {
      run_op(Backend::cuda, BatchnormBackward{ctx, sh, x.view(), gamma.data(), sm.data(), sis.data(), dy.view(),
                                              dx.view(), dg.data(), db.data()});
    });
    const double fwd_act = time_ms([&] {
      run_op(Backend::cuda, BatchnormForwardStats{ctx, sh, x.view(), rm.data(), stats});
      run_op(Backend::cuda, BatchnormForwardApply{ctx, sh, stats, x.view(), gamma.data(), beta.data(), &relu, y.view(),
                                                  rm.data(), rv.data(), sm.data(), sis.data()});
    });
    const double bwd_act = time_ms([&] {
      run_op(Backend::cuda, BatchnormBackwardStats{ctx, sh, x.view(), y.view(), &relu, sm.data(), sis.data(),
                                                   dy.view(), grad_sums, dg.data(), db.data()});
      run_op(Backend::cuda, BatchnormBackwardApply{ctx, sh, grad_sums, x.view(), y.view(), &relu, gamma.data(),
                                                   sm.data(), sis.data(), dy.view(), dx.view()});
    });
    const double mb = n * 2.0 / 1e6;
    WARN("batchnorm bf16 N=" << c.N << " C=" << c.C << " " << c.H << "x" << c.W << ": forward " << fwd << " ms ("
                             << 3 * mb / fwd << " GB/s), backward " << bwd << " ms (" << 5 * mb / bwd
                             << " GB/s), phased + relu forward " << fwd_act << " ms (" << 3 * mb / fwd_act
                             << " GB/s), backward " << bwd_act << " ms (" << 7 * mb / bwd_act << " GB/s)");
  }
}
