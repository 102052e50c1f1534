// MathMode::tf32 on the GPU against the float64 CPU oracle: cuDNN convolutions (forward, data and
// filter gradients; the heuristic's default row and the implicit-GEMM rows by name) and cuBLAS
// dense (forward and backward) each within the TF32 tolerance, and under fp32 within the FP32 one
// (accuracy_tolerance.h, the autotuner's limits); on large shapes tf32 must differ from fp32 (the
// tensor cores were used), and dense's cuBLAS handle must be back in FP32 after a tf32 call.
#include <cmath>
#include <string>
#include <vector>

#include "core/cuda_context.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "ops/dense.h"
#include "support/catch.h"
#include "support/device_floats.h"
#include "support/test_util.h"
#include "tune/accuracy_tolerance.h"

using namespace cnn;
using cnn::test::DeviceFloats;

namespace {

// ||got - ref|| / ||ref|| in double.
double rel_l2(const std::vector<float>& got, const std::vector<double>& ref) {
  REQUIRE(got.size() == ref.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
    norm += ref[i] * ref[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::vector<double> dbl(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

double tolerance_of(MathMode m) { return conv_tolerance(m); }

// The operands of one conv shape and the float64 oracle of every direction.
struct ConvCase {
  Conv2dShape sh;
  std::vector<float> x, w, b, dy;
  std::vector<double> y, dx, dw;  // dw followed by db
  explicit ConvCase(const Conv2dShape& shape, uint64_t seed)
      : sh(shape),
        x(test::random_floats(size_t(sh.N * sh.C * sh.H * sh.W), seed)),
        w(test::random_floats(size_t(sh.weight_numel()), seed + 1)),
        b(test::random_floats(size_t(sh.K), seed + 2)),
        dy(test::random_floats(size_t(sh.N * sh.K * sh.P * sh.Q), seed + 3)) {
    const ExecContext cpu = ExecContext::cpu();
    const std::vector<double> xd = dbl(x), wd = dbl(w), bd = dbl(b), dyd = dbl(dy);
    y.resize(size_t(sh.N * sh.K * sh.P * sh.Q));
    dx.resize(x.size());
    dw.resize(w.size() + b.size());
    conv2d_forward_reference<double>(cpu, sh, xd.data(), wd.data(), bd.data(), y.data());
    conv2d_backward_reference<double>(cpu, sh, xd.data(), wd.data(), dyd.data(), dx.data(), dw.data(),
                                      dw.data() + w.size());
  }
  // Runs row `name` of direction d under `math` on `ctx`; returns its output (dw then db).
  std::vector<float> run(const CudaContext& cuda, ConvDir d, const std::string& name, MathMode math) const {
    const ExecContext& ctx = cuda.ctx();
    DeviceFloats dx_(x), dw_(w), db_(b), ddy(dy);
    DeviceFloats out_y = DeviceFloats::poisoned(int64_t(y.size()));
    DeviceFloats out_dx = DeviceFloats::poisoned(int64_t(x.size()));
    DeviceFloats out_dw = DeviceFloats::poisoned(int64_t(w.size())), out_db = DeviceFloats::poisoned(int64_t(b.size()));
    const Backend cudnn = Backend::cudnn;
    if (d == ConvDir::forward) {
      run_op(cudnn, Conv2dForward{&ctx, sh, dx_.data(), dw_.data(), db_.data(), out_y.data(), math}, name);
    } else if (d == ConvDir::backward_data) {
      run_op(cudnn, Conv2dBackwardData{&ctx, sh, dw_.data(), ddy.data(), out_dx.data(), math}, name);
    } else {
      run_op(cudnn, Conv2dBackwardFilter{&ctx, sh, dx_.data(), ddy.data(), out_dw.data(), out_db.data(), math}, name);
    }
    cuda.synchronize();
    if (d == ConvDir::forward) return out_y.get();
    if (d == ConvDir::backward_data) return out_dx.get();
    std::vector<float> v = out_dw.get(), vb = out_db.get();
    v.insert(v.end(), vb.begin(), vb.end());
    return v;
  }
  const std::vector<double>& oracle(ConvDir d) const {
    return d == ConvDir::forward ? y : d == ConvDir::backward_data ? dx : dw;
  }
};

}  // namespace

TEST_CASE("cudnn convolutions under tf32 are within the TF32 tolerance of the float64 oracle, fp32 within FP32's",
          "[gpu][cudnn]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const Conv2dShape shapes[] = {Conv2dShape::make(4, 64, 12, 12, 64, 3, 3, 1, 1, 1, 1),
                                Conv2dShape::make(2, 32, 9, 9, 48, 1, 1),
                                Conv2dShape::make(3, 16, 11, 10, 24, 5, 5, 2, 2, 2, 2),
                                Conv2dShape::make(2, 32, 10, 10, 32, 3, 3, 1, 1, 1, 1, 1, 1, 32),
                                Conv2dShape::make(1, 3, 17, 13, 8, 3, 3)};
  // The heuristic's default row and the plain implicit-GEMM rows (FFT and Winograd rows are held
  // to the transform tolerance elsewhere, test_cudnn.cpp).
  const std::vector<std::string> names[3] = {{"cudnn", "cudnn:implicit_gemm", "cudnn:implicit_precomp_gemm"},
                                             {"cudnn", "cudnn:algo_1"},
                                             {"cudnn", "cudnn:algo_1"}};
  uint64_t seed = 100;
  for (const Conv2dShape& sh : shapes) {
    const ConvCase c(sh, seed += 10);
    for (ConvDir d : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter})
      for (const std::string& name : names[size_t(d)])
        for (MathMode math : {MathMode::fp32, MathMode::tf32}) {
          INFO(sh.to_string() << " " << to_string(d) << " " << name << " " << to_string(math));
          const ConvAlgo* row = find_impl(conv2d_table(d), Backend::cudnn, DType::f32, name);
          REQUIRE(row);
          if (!row->can_implement(cuda.ctx(), sh, math)) continue;  // cuDNN's answer for this shape
          const double err = rel_l2(c.run(cuda, d, name, math), c.oracle(d));
          INFO("relative L2 from float64: " << err);
          CHECK(err <= tolerance_of(math));
        }
  }
}

TEST_CASE("cudnn convolutions under tf32 use the tensor cores on a large layer and fp32 does not", "[gpu][cudnn]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  cuda.ctx().deterministic = true;  // the same algorithm gives the same bits (checked below)
  const ConvCase c(Conv2dShape::make(16, 128, 16, 16, 128, 3, 3, 1, 1, 1, 1), 7);
  for (ConvDir d : {ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter}) {
    const std::vector<float> fp32 = c.run(cuda, d, "cudnn", MathMode::fp32);
    const std::vector<float> tf32 = c.run(cuda, d, "cudnn", MathMode::tf32);
    const double e32 = rel_l2(fp32, c.oracle(d)), e19 = rel_l2(tf32, c.oracle(d));
    INFO(to_string(d) << ": fp32 " << e32 << ", tf32 " << e19 << " from float64");
    CHECK(e32 <= kConvAccuracyTolerance);
    // TF32's rounding of the factors (2^-11, about 3e-4 relative L2 on these uniform operands) shows
    // where FP32 algorithms stay near 1e-7 (GEMM) to 1e-5 (FFT): the tensor cores were used.
    CHECK(e19 > 3e-5);
    CHECK(e19 > e32);
    CHECK(e19 <= kTf32AccuracyTolerance);
    // Back to fp32 on the same context: the memo keeps the two math modes apart.
    CHECK(c.run(cuda, d, "cudnn", MathMode::fp32) == fp32);
  }
}

TEST_CASE("dense cuda under tf32 is within the TF32 tolerance of the float64 oracle and leaves cuBLAS in FP32",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  CudaContext cuda;
  const ExecContext& ctx = cuda.ctx();
  for (const DenseShape sh : {DenseShape{256, 1024, 512, true}, DenseShape{7, 33, 5, true}}) {
    const std::vector<float> x = test::random_floats(size_t(sh.N * sh.C), 31), w = test::random_floats(size_t(sh.K * sh.C), 32),
                             b = test::random_floats(size_t(sh.K), 33), dy = test::random_floats(size_t(sh.N * sh.K), 34);
    std::vector<double> y(size_t(sh.N * sh.K)), dx(x.size()), dw(w.size()), db(b.size());
    const ExecContext cpu = ExecContext::cpu();
    const std::vector<double> xd = dbl(x), wd = dbl(w), bd = dbl(b), dyd = dbl(dy);
    dense_forward_reference<double>(cpu, sh, xd.data(), wd.data(), bd.data(), y.data());
    dense_backward_reference<double>(cpu, sh, xd.data(), wd.data(), dyd.data(), dx.data(), dw.data(), db.data());
    struct Out {
      std::vector<float> y, dx, dw, db;
    };
    auto run = [&](MathMode math) {
      DeviceFloats gx(x), gw(w), gb(b), gdy(dy), gy = DeviceFloats::poisoned(int64_t(y.size())),
                                                gdx = DeviceFloats::poisoned(int64_t(x.size())),
                                                gdw = DeviceFloats::poisoned(int64_t(w.size())),
                                                gdb = DeviceFloats::poisoned(int64_t(b.size()));
      run_op(Backend::cuda, DenseForward{&ctx, sh, gx.data(), gw.data(), gb.data(), gy.data(), math});
      run_op(Backend::cuda,
             DenseBackward{&ctx, sh, gx.data(), gw.data(), gdy.data(), gdx.data(), gdw.data(), gdb.data(), math});
      cuda.synchronize();
      return Out{gy.get(), gdx.get(), gdw.get(), gdb.get()};
    };
    const Out before = run(MathMode::fp32), tf32 = run(MathMode::tf32), after = run(MathMode::fp32);
    const std::pair<const char*, double> errs[][2] = {
        {{"y fp32", rel_l2(before.y, y)}, {"y tf32", rel_l2(tf32.y, y)}},
        {{"dx fp32", rel_l2(before.dx, dx)}, {"dx tf32", rel_l2(tf32.dx, dx)}},
        {{"dw fp32", rel_l2(before.dw, dw)}, {"dw tf32", rel_l2(tf32.dw, dw)}},
        {{"db fp32", rel_l2(before.db, db)}, {"db tf32", rel_l2(tf32.db, db)}}};
    for (const auto& pair : errs) {
      INFO("N=" << sh.N << " C=" << sh.C << " K=" << sh.K << ": " << pair[0].first << " " << pair[0].second << ", "
                << pair[1].first << " " << pair[1].second);
      CHECK(pair[0].second <= tolerance_of(MathMode::fp32));
      CHECK(pair[1].second <= tolerance_of(MathMode::tf32));
    }
    // db is our FP32 column sum in both modes.
    CHECK(tf32.db == before.db);
    if (sh.C >= 1024) {
      INFO("y: fp32 " << errs[0][0].second << ", tf32 " << errs[0][1].second);
      CHECK(errs[0][1].second > 3e-5);  // the GEMM ran on TF32 tensor cores (see the conv test)
      CHECK(errs[0][1].second > 10 * errs[0][0].second);
    }
    // The handle is back in pedantic FP32 after the tf32 call: the same bits as before it.
    CHECK(after.y == before.y);
    CHECK(after.dx == before.dx);
    CHECK(after.dw == before.dw);
  }
}
