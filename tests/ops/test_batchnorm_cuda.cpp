// Batchnorm CUDA kernels beyond what the harness compares with the reference
// (test_backend_ops_batchnorm.cpp): run-to-run bitwise equality (f32 NCHW and bf16 channels-last),
// the bf16/f16 one-kernel path against itself (bits), the two-kernel path (rounding) and a CUDA
// graph replay, shapes without batch statistics rejected, and hidden benchmarks.
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <functional>
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

// bf16 (or f16) channels-last activations on the GPU: an uninitialised one, or `nchw` rounded once.
Tensor bf16_activation(CudaContext& cuda, const BatchnormShape& sh, DType dtype = DType::bf16) {
  return Tensor::empty(Shape{sh.N, sh.C, sh.H, sh.W}, Device::cuda, "bf16 activation", dtype);
}
Tensor bf16_activation(CudaContext& cuda, const BatchnormShape& sh, const std::vector<float>& nchw,
                       DType dtype = DType::bf16) {
  Tensor t = bf16_activation(cuda, sh, dtype);
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

// How run_training_row's fused backward gets act': from the forward's y (beta not given), or with
// beta given (a sign-only activation's derivative from x, ops/batchnorm.h), and then optionally
// with y replaced by -1 everywhere, which the backward must not read.
enum class BackwardY { read, beta, beta_poisoned_y, poisoned_y };

// One training step's batchnorm on the bf16 (f16) training rows named `row` ("" the default,
// "cuda:one_kernel", "cuda:two_kernels"): the plain pair, or with `act` the one-rank pair with
// that activation fused (its backward reads the forward's y, or not: by). `stats` gets the
// forward's stats then the backward's sums (the one-rank pair only). Outputs in storage order;
// y_infer unused.
// The per-channel operands of one training step, and its calls on activation views (y_bwd: the y
// the backward reads; beta_bwd: the beta it is given).
struct StepOperands {
  DeviceFloats gamma, beta, rm, rv, sm, sis, dg, db, sums;
  StepOperands(const Inputs& in, int64_t C)
      : gamma(in.gamma), beta(in.beta), rm(in.rm0), rv(in.rv0), sm(DeviceFloats::poisoned(C)),
        sis(DeviceFloats::poisoned(C)), dg(DeviceFloats::poisoned(C)), db(DeviceFloats::poisoned(C)),
        sums(DeviceFloats::poisoned(4 * (2 * C + 1))) {}
  double* stats() { return reinterpret_cast<double*>(sums.data()); }
  // The forward's stats then the backward's sums, as doubles.
  std::vector<double> all_sums(int64_t C) {
    const std::vector<float> raw = sums.get();
    return {reinterpret_cast<const double*>(raw.data()), reinterpret_cast<const double*>(raw.data()) + 4 * C + 2};
  }
};

// Which calls of a step run_calls makes.
enum Part { kForward = 1, kBackward = 2, kBoth = 3 };

// The step's forward and/or backward calls (no synchronisation: a CUDA graph may capture them).
void run_calls(CudaContext& cuda, const BatchnormShape& sh, const char* row, const ActivationParams* act,
               StepOperands& o, ConstView x, View y, ConstView y_bwd, ConstView dy, View dx, const float* beta_bwd,
               int parts = kBoth) {
  const ExecContext* ctx = &cuda.ctx();
  if (act && (parts & kForward))
    run_op(Backend::cuda,
           BatchnormForwardTrainAct{ctx, sh, x, o.gamma.data(), o.beta.data(), act, y, o.rm.data(), o.rv.data(),
                                    o.sm.data(), o.sis.data(), o.stats()},
           row);
  if (act && (parts & kBackward))
    run_op(Backend::cuda,
           BatchnormBackwardAct{ctx, sh, x, y_bwd, act, o.gamma.data(), o.sm.data(), o.sis.data(), dy,
                                o.stats() + 2 * sh.C + 1, dx, o.dg.data(), o.db.data(), beta_bwd},
           row);
  if (!act && (parts & kForward))
    run_op(Backend::cuda,
           BatchnormForwardTrain{ctx, sh, x, o.gamma.data(), o.beta.data(), y, o.rm.data(), o.rv.data(), o.sm.data(),
                                 o.sis.data()},
           row);
  if (!act && (parts & kBackward))
    run_op(Backend::cuda,
           BatchnormBackward{ctx, sh, x, o.gamma.data(), o.sm.data(), o.sis.data(), dy, dx, o.dg.data(), o.db.data()},
           row);
}

void run_step(CudaContext& cuda, const BatchnormShape& sh, const char* row, const ActivationParams* act,
              StepOperands& o, ConstView x, View y, ConstView y_bwd, ConstView dy, View dx, const float* beta_bwd) {
  run_calls(cuda, sh, row, act, o, x, y, y_bwd, dy, dx, beta_bwd);
  cuda.synchronize();
}

Outputs run_training_row(CudaContext& cuda, const BatchnormShape& sh, const Inputs& in, const char* row, DType dtype,
                         const ActivationParams* act, std::vector<double>* stats = nullptr,
                         BackwardY by = BackwardY::read) {
  Tensor x = bf16_activation(cuda, sh, in.x, dtype), dy = bf16_activation(cuda, sh, in.dy, dtype);
  Tensor y = bf16_activation(cuda, sh, dtype), dx = bf16_activation(cuda, sh, dtype);
  StepOperands o(in, sh.C);
  const bool poisoned = by == BackwardY::beta_poisoned_y || by == BackwardY::poisoned_y;
  Tensor bad = poisoned ? bf16_activation(cuda, sh, std::vector<float>(in.x.size(), -1.0f), dtype) : Tensor();
  const float* beta_bwd = by == BackwardY::beta || by == BackwardY::beta_poisoned_y ? o.beta.data() : nullptr;
  run_step(cuda, sh, row, act, o, x.view(), y.view(), poisoned ? bad.view() : y.view(), dy.view(), dx.view(),
           beta_bwd);
  if (stats && act) *stats = o.all_sums(sh.C);
  return Outputs{y.to_vector(), o.rm.get(), o.rv.get(), o.sm.get(), o.sis.get(), dx.to_vector(), o.dg.get(),
                 o.db.get(), {}};
}

// run_training_row on the f32 NCHW rows; offset: floats the activations' device pointers are moved
// by (1: misaligned, the scalar path).
Outputs run_training_row_f32(CudaContext& cuda, const BatchnormShape& sh, const Inputs& in, const char* row,
                             const ActivationParams* act, std::vector<double>* stats = nullptr, int64_t offset = 0) {
  const int64_t n = static_cast<int64_t>(in.x.size());
  DeviceFloats x(in.x, offset), dy(in.dy, offset), y = DeviceFloats::poisoned(n, offset),
      dx = DeviceFloats::poisoned(n, offset);
  StepOperands o(in, sh.C);
  run_step(cuda, sh, row, act, o, x.data(), y.data(), y.data(), dy.data(), dx.data(), nullptr);
  if (stats && act) *stats = o.all_sums(sh.C);
  return Outputs{y.get(), o.rm.get(), o.rv.get(), o.sm.get(), o.sis.get(), dx.get(), o.dg.get(), o.db.get(), {}};
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

// Two uncaptured steps from the inputs' running statistics (they move), then the same from the same
// start captured on `stream` into a CUDA graph and replayed twice: the same bits.
void check_replay(const std::function<void()>& step, const std::function<Outputs()>& state, StepOperands& o,
                  const Inputs& in, cudaStream_t stream) {
  o.rm.set(in.rm0);
  o.rv.set(in.rv0);
  step();
  step();
  const Outputs eager = state();
  o.rm.set(in.rm0);
  o.rv.set(in.rv0);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  step();
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  const Outputs replayed = state();
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  check_bitwise_equal(eager, replayed);
  CHECK(bitwise_equal(eager.running_mean, replayed.running_mean));
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

// The shapes of the one-kernel tests: mini_xception's at batch 32 (C = 8 at 46x46 and 44x44 take
// 3 and 4 rows a thread; C = 16 at 44x44; 128 channels in two tiles at 3x3 and 6x6), C = 24 (a
// tile of 3 groups), C = 12 and 7 (the scalar path), a partial last slice (N = 5).
const Case kOneKernelCases[] = {{32, 8, 46, 46, 0.5f}, {32, 16, 44, 44, 0},  {32, 32, 22, 22, 0},
                                {32, 64, 11, 11, 2.0f}, {32, 128, 3, 3, 0},   {32, 128, 6, 6, 0},
                                {5, 24, 13, 13, 0},     {32, 12, 24, 24, 0},  {9, 7, 17, 17, 1.0f}};

// Two paths' 16-bit outputs, each rounded once from FP32 values that agree to a few float ulps:
// they differ by at most one ulp where one value sits near a rounding boundary, twice the one
// rounding of kBf16OutputVsCpu (kF16OutputVsCpu).
constexpr test::Tolerance kTwoBf16Roundings{1e-4, 2 * test::kBf16OutputVsCpu.rtol};
constexpr test::Tolerance kTwoF16Roundings{1e-4, 2 * test::kF16OutputVsCpu.rtol};

// Every output of a against b: the bf16 outputs (y, dx) within two bf16 roundings, the FP32 ones
// (statistics, dgamma, dbeta) within what the threads' FP32 sums in another slicing change after
// rounding to float (a few ulps; dgamma and dbeta are sums of many terms, hence the atol,
// grad_atol: see paths_grad_atol).
void check_paths_agree(const Outputs& a, const Outputs& b, double grad_atol = 1e-4) {
  const test::Tolerance fp32{1e-5, 1e-5};
  CHECK(test::compare(a.y, b.y, kTwoBf16Roundings) == "");
  CHECK(test::compare(a.dx, b.dx, kTwoBf16Roundings) == "");
  CHECK(test::compare(a.running_mean, b.running_mean, fp32) == "");
  CHECK(test::compare(a.running_var, b.running_var, fp32) == "");
  CHECK(test::compare(a.save_mean, b.save_mean, fp32) == "");
  CHECK(test::compare(a.save_inv_std, b.save_inv_std, fp32) == "");
  CHECK(test::compare(a.dgamma, b.dgamma, test::Tolerance{grad_atol, 1e-5}) == "");
  CHECK(test::compare(a.dbeta, b.dbeta, test::Tolerance{grad_atol, 1e-5}) == "");
}

// The atol of two paths' backward sums (dgamma, dbeta, the phased sums) with activation act. Two
// paths' y may differ by one bf16 ulp where their statistics (FP32 thread sums, sliced apart) move
// a value across a rounding boundary, about 1e-7 / 2^-9 of the elements; elu's gradient reads y's
// value, so each such element moves g = dy (y + alpha) by |dy| ulp(y) <= 2^-9 (y in (-alpha, 0]
// with alpha 0.5, |dy| <= 1): up to ~2 such elements a channel at these shapes' 67K rows, four
// allowed. relu's reads only y's sign, which one rounding cannot flip; no activation reads no y.
double paths_grad_atol(const ActivationParams* act) {
  return act && act->kind == ActivationKind::elu ? 4.0 * std::ldexp(1.0, -9) : 1e-4;
}

TEST_CASE("batchnorm cuda bf16 one-kernel path repeats bit for bit and agrees with the two-kernel path",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ActivationParams relu{ActivationKind::relu, 0.0f}, elu{ActivationKind::elu, 0.5f};
  for (const Case& c : kOneKernelCases) {
    const BatchnormShape sh = make_batchnorm_shape(c.N, c.C, c.H, c.W);
    INFO("N=" << c.N << " C=" << c.C << " " << c.H << "x" << c.W);
    REQUIRE(op_supports(Backend::cuda, DType::bf16, BatchnormForwardTrain{nullptr, sh}, "cuda:one_kernel"));
    const Inputs in = make_inputs(c);
    for (const ActivationParams* act : {static_cast<const ActivationParams*>(nullptr), &relu, &elu}) {
      INFO((act ? to_string(act->kind) : std::string("no activation")));
      std::vector<double> stats_one, stats_again, stats_two;
      const Outputs one = run_training_row(cuda, sh, in, "cuda:one_kernel", DType::bf16, act, &stats_one);
      const Outputs again = run_training_row(cuda, sh, in, "cuda:one_kernel", DType::bf16, act, &stats_again);
      const Outputs two = run_training_row(cuda, sh, in, "cuda:two_kernels", DType::bf16, act, &stats_two);
      check_bitwise_equal(one, again);
      CHECK(bitwise_equal(one.running_mean, again.running_mean));
      CHECK(bitwise_equal(one.save_mean, again.save_mean));
      check_paths_agree(one, two, paths_grad_atol(act));
      if (act) {
        CHECK(std::memcmp(stats_one.data(), stats_again.data(), stats_one.size() * sizeof(double)) == 0);
        // The phased sums: each thread's FP32 sum of a few rows rounds to ~6e-8 of itself, and
        // the two paths slice the rows apart; over these shapes' 10^3-10^4 partials of |sum| up
        // to ~10 that is at most ~1e-5 apart, and elu's y-dependent terms as paths_grad_atol.
        CHECK(test::compare(stats_one, stats_two, test::Tolerance{paths_grad_atol(act), 1e-6}) == "");
      }
    }
  }
}

// The default rows take the one-kernel path on these shapes (unless CNN_BATCHNORM_KERNELS=two),
// and f16 runs the same kernels.
TEST_CASE("batchnorm cuda f16 one-kernel path repeats bit for bit and agrees with the two-kernel path", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ActivationParams relu{ActivationKind::relu, 0.0f};
  for (const Case& c : {Case{32, 16, 22, 22, 0}, Case{9, 7, 17, 17, 1.0f}}) {
    const BatchnormShape sh = make_batchnorm_shape(c.N, c.C, c.H, c.W);
    const Inputs in = make_inputs(c);
    for (const ActivationParams* act : {static_cast<const ActivationParams*>(nullptr), &relu}) {
      const Outputs one = run_training_row(cuda, sh, in, "cuda:one_kernel", DType::f16, act);
      check_bitwise_equal(one, run_training_row(cuda, sh, in, "cuda:one_kernel", DType::f16, act));
      const Outputs two = run_training_row(cuda, sh, in, "cuda:two_kernels", DType::f16, act);
      CHECK(test::compare(one.y, two.y, kTwoF16Roundings) == "");
      CHECK(test::compare(one.dx, two.dx, kTwoF16Roundings) == "");
      CHECK(test::compare(one.save_inv_std, two.save_inv_std, test::Tolerance{1e-5, 1e-5}) == "");
      const Outputs dflt = run_training_row(cuda, sh, in, "", DType::f16, act);
      CHECK(test::compare(one.y, dflt.y, kTwoF16Roundings) == "");
    }
  }
}

// The f32 NCHW one-kernel path (batchnorm_nchw_one.cuh) keeps the two-kernel path's slices and adds
// them in the same order: every output, the phased sums included, is the two-kernel path's bit for
// bit, on the float4 path and the scalar one (odd H*W, or pointers moved off 16-byte alignment),
// with no activation and with three fused ones; the default row (one kernel at these sizes) too.
// (The op harness, test_backend_ops_batchnorm.cpp, holds both named rows to the reference.)
TEST_CASE("batchnorm cuda f32 one-kernel path gives the two-kernel path's bits", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ActivationParams relu{ActivationKind::relu, 0.0f}, elu{ActivationKind::elu, 0.5f},
      sigmoid{ActivationKind::sigmoid, 0.0f};
  for (const Case& c : kOneKernelCases) {
    const BatchnormShape sh = make_batchnorm_shape(c.N, c.C, c.H, c.W);
    REQUIRE(op_supports(Backend::cuda, DType::f32, BatchnormForwardTrain{nullptr, sh}, "cuda:one_kernel"));
    const Inputs in = make_inputs(c);
    for (const int64_t offset : {0, 1})
      for (const ActivationParams* act : {static_cast<const ActivationParams*>(nullptr), &relu, &elu, &sigmoid}) {
        INFO("N=" << c.N << " C=" << c.C << " " << c.H << "x" << c.W << " offset " << offset << " "
                  << (act ? to_string(act->kind) : std::string("no activation")));
        std::vector<double> s_one, s_two, s_default;
        const Outputs one = run_training_row_f32(cuda, sh, in, "cuda:one_kernel", act, &s_one, offset);
        const Outputs two = run_training_row_f32(cuda, sh, in, "cuda:two_kernels", act, &s_two, offset);
        const Outputs dflt = run_training_row_f32(cuda, sh, in, "", act, &s_default, offset);
        for (const Outputs* o : {&two, &dflt}) {
          check_bitwise_equal(one, *o);
          CHECK(bitwise_equal(one.running_mean, o->running_mean));
          CHECK(bitwise_equal(one.save_mean, o->save_mean));
        }
        if (act) {
          CHECK(std::memcmp(s_one.data(), s_two.data(), s_one.size() * sizeof(double)) == 0);
          CHECK(std::memcmp(s_one.data(), s_default.data(), s_one.size() * sizeof(double)) == 0);
        }
      }
  }
}

// A fused relu or leaky_relu backward given beta takes act' from z recomputed from x, formed as the
// channels-last forward formed it (ops/batchnorm.h): with y replaced by -1 (which a y-reading
// backward would take as "negative everywhere") its results are the y-reading backward's bit for bit
// on every path and 16-bit dtype. (The two differ only where z is positive but rounds to 0 in the
// storage type: below 2^-133 in bf16, 2^-25 in f16, which these inputs never meet.)
TEST_CASE("batchnorm cuda channels-last relu and leaky_relu backward given beta reads no y", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ActivationParams relu{ActivationKind::relu, 0.0f}, leaky{ActivationKind::leaky_relu, 0.1f};
  const Case cases[] = {{32, 16, 22, 22, 0}, {9, 7, 17, 17, 1.0f}, {64, 64, 24, 24, 0.5f}, {16, 128, 6, 6, 0}};
  for (const Case& c : cases) {
    const BatchnormShape sh = make_batchnorm_shape(c.N, c.C, c.H, c.W);
    const Inputs in = make_inputs(c);
    for (const DType dtype : {DType::bf16, DType::f16, DType::f32cl})
      for (const char* row : {"", "cuda:one_kernel", "cuda:two_kernels"}) {
        if (std::strcmp(row, "cuda:one_kernel") == 0 &&
            !op_supports(Backend::cuda, dtype, BatchnormForwardTrain{nullptr, sh}, row))
          continue;
        for (const ActivationParams* act : {&relu, &leaky}) {
          INFO("N=" << c.N << " C=" << c.C << " " << c.H << "x" << c.W << " " << to_string(dtype) << " row '" << row
                    << "' " << to_string(act->kind));
          std::vector<double> s_read, s_z;
          const Outputs read = run_training_row(cuda, sh, in, row, dtype, act, &s_read, BackwardY::read);
          const Outputs z = run_training_row(cuda, sh, in, row, dtype, act, &s_z, BackwardY::beta_poisoned_y);
          check_bitwise_equal(read, z);
          CHECK(std::memcmp(s_read.data(), s_z.data(), s_read.size() * sizeof(double)) == 0);
          // The poison matters: a backward that reads it is wrong.
          const Outputs wrong = run_training_row(cuda, sh, in, row, dtype, act, nullptr, BackwardY::poisoned_y);
          CHECK_FALSE(bitwise_equal(read.dx, wrong.dx));
        }
      }
  }
}

// The one-kernel path is a cooperative launch: captured into a CUDA graph (as a training step is),
// replays give the bits of the uncaptured calls.
TEST_CASE("batchnorm cuda bf16 one-kernel path replays from a CUDA graph bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ActivationParams relu{ActivationKind::relu, 0.0f};
  const Case c{32, 16, 22, 22, 1.0f};
  const BatchnormShape sh = make_batchnorm_shape(c.N, c.C, c.H, c.W);
  const Inputs in = make_inputs(c);
  Tensor x = bf16_activation(cuda, sh, in.x), dy = bf16_activation(cuda, sh, in.dy);
  Tensor y = bf16_activation(cuda, sh), dx = bf16_activation(cuda, sh);
  StepOperands o(in, c.C);
  auto step = [&] {
    for (const ActivationParams* act : {&relu, static_cast<const ActivationParams*>(nullptr)})
      run_calls(cuda, sh, "cuda:one_kernel", act, o, x.view(), y.view(), y.view(), dy.view(), dx.view(), nullptr);
  };
  auto state = [&] {
    cuda.synchronize();
    return Outputs{y.to_vector(), o.rm.get(), o.rv.get(), o.sm.get(), o.sis.get(), dx.to_vector(), o.dg.get(),
                   o.db.get(), {}};
  };
  check_replay(step, state, o, in, static_cast<cudaStream_t>(cuda.ctx().cuda_stream));
}

// The f32 one-kernel path captured into a CUDA graph, as a training step is: one kernel node a
// direction (the two-kernel rows capture more), and replays give the uncaptured calls' bits.
TEST_CASE("batchnorm cuda f32 one-kernel path is one graph node a direction and replays bit for bit", "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ActivationParams relu{ActivationKind::relu, 0.0f};
  const Case c{32, 16, 22, 22, 1.0f};
  const BatchnormShape sh = make_batchnorm_shape(c.N, c.C, c.H, c.W);
  const Inputs in = make_inputs(c);
  const int64_t n = static_cast<int64_t>(in.x.size());
  DeviceFloats x(in.x), dy(in.dy), y = DeviceFloats::poisoned(n), dx = DeviceFloats::poisoned(n);
  StepOperands o(in, c.C);
  auto call = [&](const char* row, const ActivationParams* act, int parts) {
    run_calls(cuda, sh, row, act, o, x.data(), y.data(), y.data(), dy.data(), dx.data(), nullptr, parts);
  };
  // Each row once uncaptured first, as a training step's first step: workspace and arrival counters
  // are allocated then, not inside a capture.
  for (const char* row : {"cuda:one_kernel", "", "cuda:two_kernels"})
    for (const ActivationParams* act : {&relu, static_cast<const ActivationParams*>(nullptr)}) call(row, act, kBoth);
  cuda.synchronize();
  cudaStream_t stream = static_cast<cudaStream_t>(cuda.ctx().cuda_stream);
  // The kernel nodes of one captured call.
  auto kernel_nodes = [&](const char* row, const ActivationParams* act, int part) {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    call(row, act, part);
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    size_t count = 0;
    CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
    int kernels = 0;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      CUDA_CHECK(cudaGraphNodeGetType(node, &type));
      kernels += type == cudaGraphNodeTypeKernel;
    }
    CUDA_CHECK(cudaGraphDestroy(graph));
    return kernels;
  };
  for (const char* row : {"cuda:one_kernel", ""})
    for (const ActivationParams* act : {&relu, static_cast<const ActivationParams*>(nullptr)})
      for (const int part : {kForward, kBackward}) {
        INFO("row '" << row << "' " << (act ? "relu" : "no activation") << " part " << part);
        CHECK(kernel_nodes(row, act, part) == 1);
      }
  CHECK(kernel_nodes("cuda:two_kernels", &relu, kForward) == 2);
  CHECK(kernel_nodes("cuda:two_kernels", &relu, kBackward) == 2);
  auto step = [&] {
    call("cuda:one_kernel", &relu, kBoth);
    call("cuda:one_kernel", nullptr, kBoth);
  };
  auto state = [&] {
    cuda.synchronize();
    return Outputs{y.get(), o.rm.get(), o.rv.get(), o.sm.get(), o.sis.get(), dx.get(), o.dg.get(), o.db.get(), {}};
  };
  check_replay(step, state, o, in, stream);
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
    // The one-kernel path where it fits, against the two-kernel rows (the plain pair) and the
    // phases above (the one-rank pair with relu): each reads its operands once.
    if (!op_supports(Backend::cuda, DType::bf16, BatchnormForwardTrain{nullptr, sh}, "cuda:one_kernel")) continue;
    const char* one = "cuda:one_kernel";
    const double fwd1 = time_ms([&] {
      run_op(Backend::cuda, BatchnormForwardTrain{ctx, sh, x.view(), gamma.data(), beta.data(), y.view(), rm.data(),
                                                  rv.data(), sm.data(), sis.data()}, one);
    });
    const double bwd1 = time_ms([&] {
      run_op(Backend::cuda, BatchnormBackward{ctx, sh, x.view(), gamma.data(), sm.data(), sis.data(), dy.view(),
                                              dx.view(), dg.data(), db.data()}, one);
    });
    const double fwd1_act = time_ms([&] {
      run_op(Backend::cuda, BatchnormForwardTrainAct{ctx, sh, x.view(), gamma.data(), beta.data(), &relu, y.view(),
                                                     rm.data(), rv.data(), sm.data(), sis.data(), stats}, one);
    });
    const double bwd1_act = time_ms([&] {
      run_op(Backend::cuda, BatchnormBackwardAct{ctx, sh, x.view(), y.view(), &relu, gamma.data(), sm.data(),
                                                 sis.data(), dy.view(), grad_sums, dx.view(), dg.data(), db.data()},
             one);
    });
    WARN("  one kernel: forward " << fwd1 << " ms (" << 2 * mb / fwd1 << " GB/s), backward " << bwd1 << " ms ("
                                  << 3 * mb / bwd1 << " GB/s), + relu forward " << fwd1_act << " ms, backward "
                                  << bwd1_act << " ms");
  }
}
