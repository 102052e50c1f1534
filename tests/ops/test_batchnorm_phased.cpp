// Phased batchnorm (sync batchnorm's per-rank sums, fused activation epilogue) on the CPU: sums of
// uneven parts (one of them empty) added together give the whole batch's forward, running
// statistics and backward (the double reference); the fused activation equals batchnorm followed
// by the activation op, forward, backward and inference, and relu's and leaky_relu's backward given
// beta reads no y.
#include <vector>

#include "ops/activation.h"
#include "ops/batchnorm.h"
#include "support/batchnorm_shape.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;

namespace {

constexpr cnn::test::Tolerance kPhased{1e-5, 1e-5};

BatchnormShape make_phased_shape(int64_t N, int64_t C, int64_t H, int64_t W) {
  return cnn::test::make_batchnorm_shape(N, C, H, W, 1e-5, 0.2);
}

std::vector<double> to_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

}  // namespace

TEST_CASE("phased batchnorm over uneven parts with summed statistics equals the whole batch", "[cpu]") {
  const int64_t C = 3, H = 4, W = 5, HW = H * W;
  const std::vector<int64_t> parts{4, 0, 3, 1};  // ranks' sample counts, one rank without samples
  int64_t N = 0;
  for (int64_t p : parts) N += p;
  const BatchnormShape whole = make_phased_shape(N, C, H, W);
  const size_t n = size_t(N * C * HW);
  std::vector<float> x = test::random_floats(n, 31, -1.0f, 3.0f);
  for (float& v : x) v += 40.0f;  // a large channel mean: the running_mean shift must keep the variance
  const std::vector<float> gamma = test::random_floats(C, 32, 0.5f, 1.5f), beta = test::random_floats(C, 33);
  const std::vector<float> dy = test::random_floats(n, 34), rm0{39.0f, 41.0f, 40.5f}, rv0{1.0f, 0.5f, 2.0f};
  const ExecContext ctx = ExecContext::cpu(2);

  // The oracle: the double reference over the whole batch.
  std::vector<double> y_ref(n), rm_ref = to_double(rm0), rv_ref = to_double(rv0), sm_ref(C), sis_ref(C), dx_ref(n),
      dg_ref(C), db_ref(C);
  const std::vector<double> xd = to_double(x), gd = to_double(gamma), bd = to_double(beta), dyd = to_double(dy);
  batchnorm_forward_train_reference<double>(ctx, whole, xd.data(), gd.data(), bd.data(), y_ref.data(), rm_ref.data(),
                                            rv_ref.data(), sm_ref.data(), sis_ref.data());
  batchnorm_backward_reference<double>(ctx, whole, xd.data(), gd.data(), sm_ref.data(), sis_ref.data(), dyd.data(),
                                       dx_ref.data(), dg_ref.data(), db_ref.data());

  // Each "rank" sums its part; the sums are added (the all-reduce); each applies to its part.
  const size_t S = size_t(2 * C + 1);
  std::vector<double> stats(S, 0.0), sums(S, 0.0);
  int64_t at = 0;
  for (int64_t p : parts) {
    std::vector<double> mine(S);
    run_op(Backend::cpu, BatchnormForwardStats{&ctx, make_phased_shape(p, C, H, W), x.data() + at * C * HW, rm0.data(), mine.data()});
    for (size_t i = 0; i < S; ++i) stats[i] += mine[i];
    at += p;
  }
  CHECK(stats[2 * C] == double(N * HW));
  std::vector<float> y(n, -99.0f), dx(n, -99.0f), dgamma(C, 0.0f), dbeta(C, 0.0f);
  std::vector<std::vector<float>> sm(parts.size(), std::vector<float>(C)), sis = sm;
  at = 0;
  for (size_t r = 0; r < parts.size(); ++r) {
    std::vector<float> rm = rm0, rv = rv0;
    const int64_t off = at * C * HW;
    run_op(Backend::cpu, BatchnormForwardApply{&ctx, make_phased_shape(parts[r], C, H, W), stats.data(), x.data() + off, gamma.data(),
                                beta.data(), nullptr, y.data() + off, rm.data(), rv.data(), sm[r].data(),
                                sis[r].data()});
    INFO("rank " << r << " with " << parts[r] << " samples");
    CHECK(compare(rm, to_float(rm_ref), kPhased) == "");  // every rank: the global running statistics
    CHECK(compare(rv, to_float(rv_ref), kPhased) == "");
    CHECK(compare(sm[r], to_float(sm_ref), kPhased) == "");
    CHECK(compare(sis[r], to_float(sis_ref), kPhased) == "");
    std::vector<double> mine(S);
    std::vector<float> dg(C), db(C);
    run_op(Backend::cpu, BatchnormBackwardStats{&ctx, make_phased_shape(parts[r], C, H, W), x.data() + off, nullptr, nullptr, sm[r].data(),
                                 sis[r].data(), dy.data() + off, mine.data(), dg.data(), db.data()});
    for (size_t i = 0; i < S; ++i) sums[i] += mine[i];
    for (int64_t c = 0; c < C; ++c) {  // the gradient reducer's sum of the ranks' shares
      dgamma[size_t(c)] += dg[size_t(c)];
      dbeta[size_t(c)] += db[size_t(c)];
    }
    at += parts[r];
  }
  CHECK(compare(y, to_float(y_ref), kPhased) == "");
  CHECK(compare(dgamma, to_float(dg_ref), kPhased) == "");
  CHECK(compare(dbeta, to_float(db_ref), kPhased) == "");
  at = 0;
  for (size_t r = 0; r < parts.size(); ++r) {
    const int64_t off = at * C * HW;
    run_op(Backend::cpu, BatchnormBackwardApply{&ctx, make_phased_shape(parts[r], C, H, W), sums.data(), x.data() + off, nullptr, nullptr,
                                 gamma.data(), sm[r].data(), sis[r].data(), dy.data() + off, dx.data() + off});
    at += parts[r];
  }
  CHECK(compare(dx, to_float(dx_ref), kPhased) == "");
}

TEST_CASE("phased batchnorm with a fused activation equals batchnorm followed by the activation", "[cpu]") {
  const ActivationParams acts[] = {{ActivationKind::relu, 0.0f},
                                   {ActivationKind::leaky_relu, 0.1f},
                                   {ActivationKind::elu, 0.7f},
                                   {ActivationKind::sigmoid, 0.0f},
                                   {ActivationKind::tanh, 0.0f}};
  const BatchnormShape sh = make_phased_shape(3, 4, 3, 5);
  const size_t n = size_t(sh.N * sh.C * sh.H * sh.W), C = size_t(sh.C);
  const std::vector<float> x = test::random_floats(n, 41, -2.0f, 2.0f), dy = test::random_floats(n, 42);
  const std::vector<float> gamma = test::random_floats(C, 43, 0.5f, 1.5f), beta = test::random_floats(C, 44);
  const ExecContext ctx = ExecContext::cpu(1);
  for (const ActivationParams& act : acts) {
    INFO(to_string(act.kind));
    // Unfused: batchnorm, then the activation layer's ops (its backward reads x = the bn output).
    std::vector<float> rm(C, 0.0f), rv(C, 1.0f), sm(C), sis(C), z(n), y(n), g(n), dx(n), dg(C), db(C), yi_bn(n),
        yi(n);
    run_op(Backend::cpu, BatchnormForwardTrain{&ctx, sh, x.data(), gamma.data(), beta.data(), z.data(), rm.data(), rv.data(),
                                sm.data(), sis.data()});
    run_op(Backend::cpu, ActivationForward{&ctx, act, int64_t(n), z.data(), y.data()});
    run_op(Backend::cpu, ActivationBackward{&ctx, act, int64_t(n), z.data(), y.data(), dy.data(), g.data()});
    run_op(Backend::cpu, BatchnormBackward{&ctx, sh, x.data(), gamma.data(), sm.data(), sis.data(), g.data(), dx.data(), dg.data(),
                           db.data()});
    run_op(Backend::cpu, BatchnormForwardInfer{&ctx, sh, x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), yi_bn.data()});
    run_op(Backend::cpu, ActivationForward{&ctx, act, int64_t(n), yi_bn.data(), yi.data()});
    // Fused: one rank, so the sums are used as they are.
    std::vector<float> frm(C, 0.0f), frv(C, 1.0f), fsm(C), fsis(C), fy(n), fdx(n), fdg(C), fdb(C), fyi(n);
    std::vector<double> stats(2 * C + 1), sums(2 * C + 1);
    run_op(Backend::cpu, BatchnormForwardStats{&ctx, sh, x.data(), frm.data(), stats.data()});
    run_op(Backend::cpu, BatchnormForwardApply{&ctx, sh, stats.data(), x.data(), gamma.data(), beta.data(), &act, fy.data(),
                                frm.data(), frv.data(), fsm.data(), fsis.data()});
    run_op(Backend::cpu, BatchnormBackwardStats{&ctx, sh, x.data(), fy.data(), &act, fsm.data(), fsis.data(), dy.data(), sums.data(),
                                 fdg.data(), fdb.data()});
    run_op(Backend::cpu, BatchnormBackwardApply{&ctx, sh, sums.data(), x.data(), fy.data(), &act, gamma.data(), fsm.data(),
                                 fsis.data(), dy.data(), fdx.data()});
    run_op(Backend::cpu, BatchnormForwardInferAct{&ctx, sh, x.data(), gamma.data(), beta.data(), frm.data(), frv.data(), &act,
                                    fyi.data()});
    CHECK(compare(fy, y, kPhased) == "");
    CHECK(compare(frm, rm, kPhased) == "");
    CHECK(compare(frv, rv, kPhased) == "");
    CHECK(compare(fdx, dx, kPhased) == "");
    CHECK(compare(fdg, dg, kPhased) == "");
    CHECK(compare(fdb, db, kPhased) == "");
    CHECK(compare(fyi, yi, kPhased) == "");
    if (batchnorm_sign_only(&act)) {
      // Given gamma and beta, relu' and leaky_relu' come from x (ops/batchnorm.h): y is null here.
      std::vector<float> zdx(n), zdg(C), zdb(C);
      std::vector<double> zsums(2 * C + 1);
      run_op(Backend::cpu, BatchnormBackwardStats{&ctx, sh, x.data(), nullptr, &act, fsm.data(), fsis.data(), dy.data(),
                                                  zsums.data(), zdg.data(), zdb.data(), gamma.data(), beta.data()});
      run_op(Backend::cpu, BatchnormBackwardApply{&ctx, sh, zsums.data(), x.data(), nullptr, &act, gamma.data(),
                                                  fsm.data(), fsis.data(), dy.data(), zdx.data(), beta.data()});
      CHECK(compare(zdx, dx, kPhased) == "");
      CHECK(compare(zdg, dg, kPhased) == "");
      CHECK(compare(zdb, db, kPhased) == "");
    }
    // The activation's own backward from its output agrees with the one from its input.
    std::vector<float> gy(n);
    run_op(Backend::cpu, ActivationBackwardFromOutput{&ctx, act, int64_t(n), y.data(), dy.data(), gy.data()});
    CHECK(compare(gy, g, kPhased) == "");
  }
}

TEST_CASE("activation_fusable refuses slopes that hide the sign of the input", "[cpu]") {
  CHECK(activation_fusable({ActivationKind::relu, 0.0f}));
  CHECK(activation_fusable({ActivationKind::leaky_relu, 0.01f}));
  CHECK_FALSE(activation_fusable({ActivationKind::leaky_relu, 0.0f}));
  CHECK_FALSE(activation_fusable({ActivationKind::elu, -1.0f}));
  CHECK(activation_fusable({ActivationKind::tanh, -1.0f}));
}
