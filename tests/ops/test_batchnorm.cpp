// Batchnorm tests: a hand-computed training step (output, running and saved statistics, gradients),
// inference with running statistics, finite differences of the double reference for dx, dgamma and
// dbeta, and the fast CPU path against the float reference (including a large channel mean).
#include <vector>

#include "core/error.h"
#include "ops/batchnorm.h"
#include "support/batchnorm_shape.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;

using cnn::test::make_batchnorm_shape;

namespace {

constexpr cnn::test::Tolerance kHand{1e-6, 1e-6};

}  // namespace

TEST_CASE("batchnorm training step matches hand-computed values", "[cpu]") {
  // One channel, x = [1, 3, 5, 7] (N=2, W=2), eps = 0: mean 4, biased var (9+1+1+9)/4 = 5,
  // unbiased 20/3, inv_std = 1/sqrt(5) = 0.4472136, xhat = [-3,-1,1,3]/sqrt(5).
  // gamma 2, beta 1: y = 1 + 2 xhat = [-1.6832816, 0.1055728, 1.8944272, 3.6832816].
  // Running stats from (0, 1), momentum 0.1: mean 0.1*4 = 0.4, var 0.9 + 0.1*20/3 = 1.5666667.
  // Backward with dy = [1,0,0,0]: dbeta = 1, dgamma = xhat0 = -3/sqrt(5) = -1.3416408,
  // dx = 2/(4 sqrt(5)) * (4 dy - 1 + 3 xhat/sqrt(5)) = 0.2236068 * [1.2, -1.6, -0.4, 0.8].
  const BatchnormShape sh = make_batchnorm_shape(2, 1, 1, 2, 0.0, 0.1);
  const std::vector<float> x{1, 3, 5, 7}, gamma{2}, beta{1}, dy{1, 0, 0, 0};
  auto ctx = ExecContext::cpu(2);
  for (bool fast : {false, true}) {
    INFO((fast ? "cpu" : "reference"));
    std::vector<float> y(4), rm{0}, rv{1}, save_mean(1), save_inv_std(1), dx(4), dgamma(1), dbeta(1);
    if (fast) {
      run_op(Backend::cpu, BatchnormForwardTrain{&ctx, sh, x.data(), gamma.data(), beta.data(), y.data(), rm.data(), rv.data(),
                                  save_mean.data(), save_inv_std.data()});
      run_op(Backend::cpu, BatchnormBackward{&ctx, sh, x.data(), gamma.data(), save_mean.data(), save_inv_std.data(), dy.data(),
                             dx.data(), dgamma.data(), dbeta.data()});
    } else {
      batchnorm_forward_train_reference(ctx, sh, x.data(), gamma.data(), beta.data(), y.data(), rm.data(),
                                        rv.data(), save_mean.data(), save_inv_std.data());
      batchnorm_backward_reference(ctx, sh, x.data(), gamma.data(), save_mean.data(), save_inv_std.data(),
                                   dy.data(), dx.data(), dgamma.data(), dbeta.data());
    }
    CHECK(compare(y, {-1.6832816f, 0.1055728f, 1.8944272f, 3.6832816f}, kHand) == "");
    CHECK(rm[0] == Approx(0.4).epsilon(1e-6));
    CHECK(rv[0] == Approx(1.5666667).epsilon(1e-6));
    CHECK(save_mean[0] == Approx(4.0).epsilon(1e-6));
    CHECK(save_inv_std[0] == Approx(0.4472136).epsilon(1e-6));
    CHECK(dbeta[0] == Approx(1.0).epsilon(1e-6));
    CHECK(dgamma[0] == Approx(-1.3416408).epsilon(1e-6));
    CHECK(compare(dx, {0.2683282f, -0.3577709f, -0.0894427f, 0.1788854f}, kHand) == "");
  }
}

TEST_CASE("batchnorm inference uses the running statistics", "[cpu]") {
  // C=2, eps=1. Channel 0: mean 1, var 3 -> (x - 1)/2, gamma 2, beta 1: x = [5, 1] -> [5, 1].
  // Channel 1: mean 0, var 8 -> x/3, gamma 0.5, beta -1: x = [2, 4] -> [-2/3, -1/3].
  const BatchnormShape sh = make_batchnorm_shape(1, 2, 1, 2, 1.0);
  const std::vector<float> x{5, 1, 2, 4}, gamma{2, 0.5f}, beta{1, -1}, rm{1, 0}, rv{3, 8};
  const std::vector<float> expected{5, 1, -0.6666667f, -0.3333333f};
  auto ctx = ExecContext::cpu(2);
  std::vector<float> y(4);
  batchnorm_forward_infer_reference(ctx, sh, x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), y.data());
  CHECK(compare(y, expected, kHand) == "");
  std::fill(y.begin(), y.end(), 0.0f);
  run_op(Backend::cpu, BatchnormForwardInfer{&ctx, sh, x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), y.data()});
  CHECK(compare(y, expected, kHand) == "");
}

TEST_CASE("batchnorm reference backward matches finite differences for dx, dgamma and dbeta", "[cpu]") {
  const BatchnormShape sh = make_batchnorm_shape(3, 2, 2, 3, 1e-3);
  const size_t n = 36, C = 2;
  auto ctx = ExecContext::cpu(1);
  std::vector<double> x = cnn::test::random_doubles(n, 51, -2.0, 3.0);
  std::vector<double> gamma = cnn::test::random_doubles(C, 52, 0.5, 1.5);
  std::vector<double> beta = cnn::test::random_doubles(C, 53);
  const std::vector<double> r = cnn::test::random_doubles(n, 54);
  auto loss = [&] {
    std::vector<double> y(n), rm(C, 0.0), rv(C, 1.0), sm(C), sis(C);
    batchnorm_forward_train_reference(ctx, sh, x.data(), gamma.data(), beta.data(), y.data(), rm.data(), rv.data(),
                                      sm.data(), sis.data());
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += y[i] * r[i];
    return s;
  };
  std::vector<double> y(n), rm(C, 0.0), rv(C, 1.0), sm(C), sis(C), dx(n), dgamma(C), dbeta(C);
  batchnorm_forward_train_reference(ctx, sh, x.data(), gamma.data(), beta.data(), y.data(), rm.data(), rv.data(),
                                    sm.data(), sis.data());
  batchnorm_backward_reference(ctx, sh, x.data(), gamma.data(), sm.data(), sis.data(), r.data(), dx.data(),
                               dgamma.data(), dbeta.data());
  CHECK(compare(dx, cnn::test::numeric_gradient(x, loss), cnn::test::kFiniteDifference) == "");
  CHECK(compare(dgamma, cnn::test::numeric_gradient(gamma, loss), cnn::test::kFiniteDifference) == "");
  CHECK(compare(dbeta, cnn::test::numeric_gradient(beta, loss), cnn::test::kFiniteDifference) == "");
}

TEST_CASE("batchnorm cpu matches the float reference over generated shapes", "[cpu]") {
  struct Case {
    int64_t N, C, H, W;
    float offset;  // added to x: a large channel mean tests the one-pass statistics
  };
  const Case cases[] = {{1, 3, 5, 7, 0}, {4, 16, 7, 9, 0}, {3, 5, 1, 1, 0},
                        {2, 1, 13, 11, 0}, {8, 8, 16, 16, 0}, {2, 3, 9, 9, 100.0f}};
  auto ctx = ExecContext::cpu(2);
  for (const Case& c : cases) {
    INFO("N=" << c.N << " C=" << c.C << " H=" << c.H << " W=" << c.W << " offset=" << c.offset);
    const BatchnormShape sh = make_batchnorm_shape(c.N, c.C, c.H, c.W);
    const size_t n = static_cast<size_t>(c.N * c.C * c.H * c.W), C = static_cast<size_t>(c.C);
    std::vector<float> x = cnn::test::random_floats(n, 61, -1.5f, 2.5f);
    for (auto& v : x) v += c.offset;
    const std::vector<float> gamma = cnn::test::random_floats(C, 62, 0.5f, 1.5f);
    const std::vector<float> beta = cnn::test::random_floats(C, 63);
    const std::vector<float> dy = cnn::test::random_floats(n, 64);
    const std::vector<float> rm0 = cnn::test::random_floats(C, 65), rv0 = cnn::test::random_floats(C, 66, 0.5f, 2.0f);

    std::vector<float> y_r(n), rm_r = rm0, rv_r = rv0, sm_r(C), sis_r(C), dx_r(n), dg_r(C), db_r(C), yi_r(n);
    batchnorm_forward_train_reference(ctx, sh, x.data(), gamma.data(), beta.data(), y_r.data(), rm_r.data(),
                                      rv_r.data(), sm_r.data(), sis_r.data());
    batchnorm_backward_reference(ctx, sh, x.data(), gamma.data(), sm_r.data(), sis_r.data(), dy.data(), dx_r.data(),
                                 dg_r.data(), db_r.data());
    batchnorm_forward_infer_reference(ctx, sh, x.data(), gamma.data(), beta.data(), rm0.data(), rv0.data(),
                                      yi_r.data());

    std::vector<float> y(n), rm = rm0, rv = rv0, sm(C), sis(C), dx(n), dg(C), db(C), yi(n);
    run_op(Backend::cpu, BatchnormForwardTrain{&ctx, sh, x.data(), gamma.data(), beta.data(), y.data(), rm.data(), rv.data(),
                                sm.data(), sis.data()});
    run_op(Backend::cpu, BatchnormBackward{&ctx, sh, x.data(), gamma.data(), sm.data(), sis.data(), dy.data(), dx.data(), dg.data(),
                           db.data()});
    run_op(Backend::cpu, BatchnormForwardInfer{&ctx, sh, x.data(), gamma.data(), beta.data(), rm0.data(), rv0.data(), yi.data()});

    const auto tol = cnn::test::kFastCpuVsReference;
    CHECK(compare(y, y_r, tol) == "");
    CHECK(compare(rm, rm_r, tol) == "");
    CHECK(compare(rv, rv_r, tol) == "");
    CHECK(compare(sm, sm_r, tol) == "");
    CHECK(compare(sis, sis_r, tol) == "");
    CHECK(compare(dx, dx_r, tol) == "");
    CHECK(compare(dg, dg_r, tol) == "");
    CHECK(compare(db, db_r, tol) == "");
    CHECK(compare(yi, yi_r, tol) == "");
  }
}

TEST_CASE("batchnorm backward skips gradients passed as null", "[cpu]") {
  const BatchnormShape sh = make_batchnorm_shape(2, 2, 1, 3);
  const std::vector<float> x = cnn::test::random_floats(12, 71), dy = cnn::test::random_floats(12, 72);
  const std::vector<float> gamma{1, 2}, sm{0.1f, -0.2f}, sis{1.5f, 0.7f};
  std::vector<float> dx_r(12), dg_r(2), db_r(2), dx(12), dg(2), db(2);
  auto ctx = ExecContext::cpu(2);
  batchnorm_backward_reference(ctx, sh, x.data(), gamma.data(), sm.data(), sis.data(), dy.data(), dx_r.data(),
                               dg_r.data(), db_r.data());
  run_op(Backend::cpu, BatchnormBackward{&ctx, sh, x.data(), gamma.data(), sm.data(), sis.data(), dy.data(), nullptr, dg.data(),
                         db.data()});
  run_op(Backend::cpu, BatchnormBackward{&ctx, sh, x.data(), gamma.data(), sm.data(), sis.data(), dy.data(), dx.data(), nullptr,
                         nullptr});
  CHECK(compare(dg, dg_r, cnn::test::kFastCpuVsReference) == "");
  CHECK(compare(db, db_r, cnn::test::kFastCpuVsReference) == "");
  CHECK(compare(dx, dx_r, cnn::test::kFastCpuVsReference) == "");
}

TEST_CASE("batchnorm rejects shapes without batch statistics", "[cpu]") {
  auto ctx = ExecContext::cpu(1);
  std::vector<float> v(4, 1.0f);
  CHECK_THROWS_WITH(run_op(Backend::cpu, BatchnormForwardTrain{&ctx, make_batchnorm_shape(1, 4, 1, 1), v.data(), v.data(), v.data(), v.data(),
                                                v.data(), v.data(), v.data(), v.data()}),
                    Catch::Matchers::Contains("more than one value per channel, got N*H*W = 1"));
  CHECK_THROWS_WITH(batchnorm_forward_infer_reference(ctx, make_batchnorm_shape(1, 0, 1, 1), v.data(), v.data(), v.data(),
                                                      v.data(), v.data(), v.data()),
                    Catch::Matchers::Contains("sizes must be positive"));
  CHECK_THROWS_WITH(run_op(Backend::cpu, BatchnormBackward{&ctx, make_batchnorm_shape(2, 1, 1, 1, 1e-5, 1.5), v.data(), v.data(), v.data(),
                                           v.data(), v.data(), v.data(), v.data(), v.data()}),
                    Catch::Matchers::Contains("momentum must be in [0, 1]"));
}
