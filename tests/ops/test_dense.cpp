// Dense tests: a hand-computed case, finite-difference check of the reference backward (double),
// and the SGEMM path against the float reference over shapes that exercise both parallel splits.
// Trap: outputs are pre-filled with NaN so a path that skips (or accumulates into) an output fails.
#include <algorithm>
#include <chrono>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "ops/blas_cpu.h"
#include "ops/dense.h"
#include "support/catch.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using cnn::test::compare;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string dense_name(const DenseShape& sh) {
  return fmt::format("dense N={} C={} K={} {}", sh.N, sh.C, sh.K, sh.has_bias ? "bias" : "no bias");
}

struct DenseData {
  DenseShape sh;
  std::vector<float> x, w, b, dy, y, dx, dw, db;
  DenseData(const DenseShape& shape, uint64_t seed)
      : sh(shape),
        x(test::random_floats(sh.N * sh.C, seed)),
        w(test::random_floats(sh.K * sh.C, seed + 1)),
        b(test::random_floats(sh.K, seed + 2)),
        dy(test::random_floats(sh.N * sh.K, seed + 3)),
        y(sh.N * sh.K, kNaN),
        dx(x.size(), kNaN),
        dw(w.size(), kNaN),
        db(b.size(), kNaN) {}
};

}  // namespace

// x = [1 2 3; 4 5 6], w = [1 0 -1; 2 1 0], b = [0.5, -1]:  y = x w^T + b
//   y = [1-3+.5, 2+2-1; 4-6+.5, 8+5-1] = [-1.5 3; -1.5 12]
// dy = [1 2; -1 0]:  dx = dy w = [1*(1,0,-1) + 2*(2,1,0); -1*(1,0,-1)] = [5 2 -1; -1 0 1]
//   dw = dy^T x = [1*(1,2,3) - (4,5,6); 2*(1,2,3)] = [-3 -3 -3; 2 4 6];  db = column sums = [0, 2]
TEST_CASE("dense matches a hand-computed 2x3 to 2 case", "[cpu]") {
  ExecContext ctx = ExecContext::cpu(2);
  const DenseShape sh{2, 3, 2, true};
  const std::vector<float> x{1, 2, 3, 4, 5, 6}, w{1, 0, -1, 2, 1, 0}, b{0.5f, -1}, dy{1, 2, -1, 0};
  const std::vector<float> y_want{-1.5f, 3, -1.5f, 12}, dx_want{5, 2, -1, -1, 0, 1}, dw_want{-3, -3, -3, 2, 4, 6},
      db_want{0, 2};
  for (bool fast : {false, true}) {
    INFO((fast ? "fast cpu" : "reference"));
    std::vector<float> y(4, kNaN), dx(6, kNaN), dw(6, kNaN), db(2, kNaN);
    if (fast) {
      run_op(Backend::cpu, DenseForward{&ctx, sh, x.data(), w.data(), b.data(), y.data()});
      run_op(Backend::cpu, DenseBackward{&ctx, sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data()});
    } else {
      dense_forward_reference<float>(ctx, sh, x.data(), w.data(), b.data(), y.data());
      dense_backward_reference<float>(ctx, sh, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data());
    }
    CHECK(compare(y, y_want, test::kExact) == "");
    CHECK(compare(dx, dx_want, test::kExact) == "");
    CHECK(compare(dw, dw_want, test::kExact) == "");
    CHECK(compare(db, db_want, test::kExact) == "");
  }
}

TEST_CASE("dense reference backward matches finite differences in double", "[cpu]") {
  ExecContext ctx = ExecContext::cpu(1);
  const std::vector<DenseShape> shapes{{1, 1, 1, true}, {3, 5, 4, true}, {2, 7, 3, false}, {4, 2, 6, true}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    const DenseShape& sh = shapes[i];
    INFO(dense_name(sh));
    std::vector<double> x = test::random_doubles(sh.N * sh.C, 10 * i + 1);
    std::vector<double> w = test::random_doubles(sh.K * sh.C, 10 * i + 2);
    std::vector<double> b = test::random_doubles(sh.K, 10 * i + 3);
    const std::vector<double> r = test::random_doubles(sh.N * sh.K, 10 * i + 4);
    std::vector<double> y(r.size());
    auto loss = [&] {
      dense_forward_reference<double>(ctx, sh, x.data(), w.data(), b.data(), y.data());
      double l = 0;
      for (size_t j = 0; j < y.size(); ++j) l += y[j] * r[j];
      return l;
    };
    // loss = sum(y * r), so dL/dy = r.
    std::vector<double> dx(x.size()), dw(w.size()), db(b.size());
    dense_backward_reference<double>(ctx, sh, x.data(), w.data(), r.data(), dx.data(), dw.data(), db.data());
    CHECK(compare(dx, test::numeric_gradient(x, loss), test::kFiniteDifference) == "");
    CHECK(compare(dw, test::numeric_gradient(w, loss), test::kFiniteDifference) == "");
    if (sh.has_bias) CHECK(compare(db, test::numeric_gradient(b, loss), test::kFiniteDifference) == "");
  }
}

// One row (M = 1) goes through a GEMV: every transpose of A and B, leading dimensions wider than
// the rows (a row block of a wider matrix), beta 0 over NaN (never read) and beta 1 (accumulated),
// against the plain sums in double.
TEST_CASE("sgemm_serial of one row matches the plain product for every transpose and leading dimension", "[cpu]") {
  const int64_t N = 37, K = 53, lda_extra = 3, ldb_extra = 5;
  for (bool trans_a : {false, true})
    for (bool trans_b : {false, true})
      for (float beta : {0.0f, 1.0f}) {
        INFO("trans_a " << trans_a << " trans_b " << trans_b << " beta " << beta);
        // op(A) (1, K): A (1, lda) or, transposed, A (K, lda) read down its first column.
        const int64_t lda = trans_a ? 1 + lda_extra : K + lda_extra;
        const std::vector<float> A = test::random_floats(size_t(trans_a ? K * lda : lda), 7);
        // op(B) (K, N): B (K, ldb) or, transposed, B (N, ldb).
        const int64_t ldb = trans_b ? K + ldb_extra : N + ldb_extra;
        const std::vector<float> B = test::random_floats(size_t((trans_b ? N : K) * ldb), 8);
        const std::vector<float> C0 = test::random_floats(size_t(N), 9);
        std::vector<float> C = beta == 0.0f ? std::vector<float>(size_t(N), kNaN) : C0;
        sgemm_serial(trans_a, trans_b, 1, N, K, 0.5f, A.data(), lda, B.data(), ldb, beta, C.data(), N);
        std::vector<float> want(static_cast<size_t>(N));
        for (int64_t n = 0; n < N; ++n) {
          double acc = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            const double a = trans_a ? A[size_t(k * lda)] : A[size_t(k)];
            const double b = trans_b ? B[size_t(n * ldb + k)] : B[size_t(k * ldb + n)];
            acc += a * b;
          }
          want[size_t(n)] = static_cast<float>(0.5 * acc + (beta == 0.0f ? 0.0 : double(C0[size_t(n)])));
        }
        CHECK(compare(C, want, test::kFastCpuVsReference) == "");
      }
}

TEST_CASE("dense fast cpu matches the reference over generated shapes", "[cpu]") {
  // Small shapes run one SGEMM; the larger ones split rows (N > K) or columns across threads.
  std::vector<DenseShape> shapes;
  for (int64_t N : {1, 5, 64, 200})
    for (int64_t C : {1, 7, 300})
      for (int64_t K : {1, 3, 130})
        for (bool bias : {true, false}) shapes.push_back({N, C, K, bias});
  for (int threads : {1, 2, 3}) {
    ExecContext ctx = ExecContext::cpu(threads);
    for (const DenseShape& sh : shapes) {
      INFO(fmt::format("{} threads, {}", threads, dense_name(sh)));
      DenseData fast(sh, 5), ref(sh, 5);
      run_op(Backend::cpu, DenseForward{&ctx, sh, fast.x.data(), fast.w.data(), fast.b.data(), fast.y.data()});
      dense_forward_reference<float>(ctx, sh, ref.x.data(), ref.w.data(), ref.b.data(), ref.y.data());
      CHECK(compare(fast.y, ref.y, test::kFastCpuVsReference) == "");
      run_op(Backend::cpu, DenseBackward{&ctx, sh, fast.x.data(), fast.w.data(), fast.dy.data(), fast.dx.data(), fast.dw.data(),
                         fast.db.data()});
      dense_backward_reference<float>(ctx, sh, ref.x.data(), ref.w.data(), ref.dy.data(), ref.dx.data(), ref.dw.data(),
                                      ref.db.data());
      CHECK(compare(fast.dx, ref.dx, test::kFastCpuVsReference) == "");
      CHECK(compare(fast.dw, ref.dw, test::kFastCpuVsReference) == "");
      CHECK(compare(fast.db, ref.db, test::kFastCpuVsReference) == "");
      // Each gradient alone, into fresh NaN buffers.
      DenseData alone(sh, 5);
      run_op(Backend::cpu, DenseBackward{&ctx, sh, alone.x.data(), alone.w.data(), alone.dy.data(), alone.dx.data(), nullptr, nullptr});
      run_op(Backend::cpu, DenseBackward{&ctx, sh, alone.x.data(), alone.w.data(), alone.dy.data(), nullptr, alone.dw.data(), nullptr});
      run_op(Backend::cpu, DenseBackward{&ctx, sh, alone.x.data(), alone.w.data(), alone.dy.data(), nullptr, nullptr, alone.db.data()});
      CHECK(compare(alone.dx, fast.dx, test::kExact) == "");
      CHECK(compare(alone.dw, fast.dw, test::kExact) == "");
      CHECK(compare(alone.db, fast.db, test::kExact) == "");
    }
  }
}

TEST_CASE("dense rejects non-positive sizes", "[cpu]") {
  ExecContext ctx = ExecContext::cpu(1);
  std::vector<float> buf(16, 1.0f);
  CHECK_THROWS_AS(run_op(Backend::cpu, DenseForward{&ctx, DenseShape{0, 3, 2, true}, buf.data(), buf.data(), buf.data(), buf.data()}),
                  Error);
  CHECK_THROWS_AS(
      dense_forward_reference<float>(ctx, DenseShape{2, 3, 0, true}, buf.data(), buf.data(), buf.data(), buf.data()),
      Error);
}

// The two dense layers of the Fashion-MNIST CNN at batch 64; run with: test_ops "[bench]"
TEST_CASE("dense fast cpu benchmark on the Fashion-MNIST layers", "[.][bench]") {
  for (int threads : {1, 0})  // one thread, then all cores
    for (const DenseShape& sh : {DenseShape{64, 3136, 128, true}, DenseShape{64, 128, 10, true}}) {
      ExecContext ctx = ExecContext::cpu(threads);
      DenseData d(sh, 1);
      double fwd = test::best_of_ms([&] { run_op(Backend::cpu, DenseForward{&ctx, sh, d.x.data(), d.w.data(), d.b.data(), d.y.data()}); });
      double bwd = test::best_of_ms([&] {
        run_op(Backend::cpu, DenseBackward{&ctx, sh, d.x.data(), d.w.data(), d.dy.data(), d.dx.data(), d.dw.data(), d.db.data()});
      });
      const double f = sh.flops_forward();
      WARN(fmt::format("{} ({} threads): forward {:.3f} ms ({:.1f} GFLOP/s), backward {:.3f} ms ({:.1f} GFLOP/s)",
                       dense_name(sh), ctx.threads(), fwd, f / fwd * 1e-6, bwd, 2 * f / bwd * 1e-6));
    }
}
