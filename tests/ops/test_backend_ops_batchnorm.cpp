// Batchnorm in the cross-backend op harness (test_backend_ops.cpp says how it works): the plain
// entry points against the double reference, over (C) and (C, H, W) inputs, N = 1, odd sizes and
// large channel means; the phased ones against the cpu f32 row (checked against the reference in
// test_batchnorm_phased.cpp), with every fused activation. x, y, dy, dx are marked activations with
// bf16-exact values, so the bf16 rows (channels-last) run on the same cases; the channels-last
// shapes (C = 8, 16, 64: the 16-byte path; C = 7: the scalar one) span several blocks of rows.
// The training rows of every dtype forced onto one path ("cuda:one_kernel", "cuda:two_kernels") run
// the same cases (one_kernel those it takes), as do the one-rank pairs (forward_train_act,
// backward_act: both phases in one call) against the cpu f32 row.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ops/batchnorm.h"
#include "support/batchnorm_shape.h"
#include "support/op_harness.h"

using namespace cnn;
using namespace cnn::test;

namespace {

// ---- batchnorm: the plain entry points against the reference, the phased ones against the cpu row ----

struct BatchnormCases {
  std::vector<Case<BatchnormForwardTrain>> train;
  std::vector<Case<BatchnormForwardInfer>> infer;
  std::vector<Case<BatchnormBackward>> backward;
};

struct BatchnormSize {
  int64_t N, C, H, W;
  float mean;  // added to x: a large channel mean tests the shifted statistics
};

const BatchnormSize kBatchnormSizes[] = {
    {2, 3, 1, 1, 0},     {64, 33, 1, 1, 0}, {1, 3, 5, 7, 0},       {1, 1, 2, 1, 0},      {4, 16, 7, 9, 0},
    {3, 5, 4, 4, 0},     {2, 1, 13, 11, 0}, {8, 8, 16, 16, 0},     {2, 3, 9, 9, 100.0f}, {32, 4, 32, 32, 0},
    {128, 3, 17, 17, 0}, {5, 70, 3, 3, 0},  {257, 2, 1, 1, 50.0f}, {16, 600, 2, 2, 0},
    // channels-last: several slices of rows, a 16-byte group per thread or (C = 7) one channel
    {8, 8, 24, 24, 0},   {4, 16, 24, 24, 0}, {2, 64, 24, 24, 3.0f}, {10, 7, 10, 10, 0},
    // the sums pass's last block adding more than two slices a thread (264 slices of 32 rows a block)
    {64, 64, 24, 24, 1.0f},
    // the one-kernel path (rows cuda:one_kernel; the default rows take it too): several rows a
    // thread and a partial last slice (C = 8: 69 slices of 2 x 256 rows; 91 of 12 x 32 scalar),
    // mini_xception's 16 channels at 22x22 (61 slices), and C = 24 (3 groups of 8 a tile).
    {8, 8, 66, 66, 0.5f}, {32, 16, 22, 22, 0},  {3, 24, 13, 13, 0},
};

struct BatchnormInputs {
  std::vector<float> x, gamma, beta, dy, running_mean, running_var;
};

BatchnormInputs batchnorm_inputs(const BatchnormSize& z) {
  const size_t n = size_t(z.N * z.C * z.H * z.W), C = size_t(z.C);
  BatchnormInputs in{random_floats(n, 61 + n, -1.5f, 2.5f), random_floats(C, 62, 0.5f, 1.5f), random_floats(C, 63),
                     random_floats(n, 64 + n),             random_floats(C, 65),             random_floats(C, 66, 0.5f, 2.0f)};
  for (float& v : in.x) v += z.mean;
  in.x = bf16_exact(in.x);
  in.dy = bf16_exact(in.dy);
  return in;
}

std::string batchnorm_label(const BatchnormSize& z) {
  return fmt::format("N={} C={} H={} W={} mean {}", z.N, z.C, z.H, z.W, z.mean);
}

BatchnormCases cases_batchnorm() {
  BatchnormCases out;
  for (const BatchnormSize& z : kBatchnormSizes) {
    const BatchnormShape sh = make_batchnorm_shape(z.N, z.C, z.H, z.W);
    const BatchnormInputs in = batchnorm_inputs(z);
    const size_t n = in.x.size(), C = in.gamma.size();
    std::vector<double> x = to_double(in.x), gamma = to_double(in.gamma), beta = to_double(in.beta),
                        dy = to_double(in.dy), rm = to_double(in.running_mean), rv = to_double(in.running_var);
    std::vector<double> y(n), mean(C), inv_std(C), y_infer(n), dx(n), dgamma(C), dbeta(C);
    batchnorm_forward_infer_reference<double>(oracle_ctx(), sh, x.data(), gamma.data(), beta.data(), rm.data(),
                                              rv.data(), y_infer.data());
    batchnorm_forward_train_reference<double>(oracle_ctx(), sh, x.data(), gamma.data(), beta.data(), y.data(),
                                              rm.data(), rv.data(), mean.data(), inv_std.data());
    batchnorm_backward_reference<double>(oracle_ctx(), sh, x.data(), gamma.data(), mean.data(), inv_std.data(),
                                         dy.data(), dx.data(), dgamma.data(), dbeta.data());
    Case<BatchnormForwardTrain> t{batchnorm_label(z)};
    const std::vector<int64_t> dims{z.N, z.C, z.H, z.W};
    t.in("x", in.x).act(dims).in("gamma", in.gamma).in("beta", in.beta).out("y", to_float(y)).act(dims);
    t.inout("running_mean", in.running_mean, to_float(rm)).inout("running_var", in.running_var, to_float(rv));
    t.out("save_mean", to_float(mean)).out("save_inv_std", to_float(inv_std));
    t.bind = [sh](Bound& b) {
      return BatchnormForwardTrain{b.ctx(), sh, b.in("x"), b.f32("gamma"), b.f32("beta"), b.out("y"),
                                   b.f32_out("running_mean"), b.f32_out("running_var"), b.f32_out("save_mean"),
                                   b.f32_out("save_inv_std")};
    };
    out.train.push_back(t);
    Case<BatchnormForwardInfer> f{batchnorm_label(z)};
    f.in("x", in.x).act(dims).in("gamma", in.gamma).in("beta", in.beta).in("running_mean", in.running_mean);
    f.in("running_var", in.running_var).out("y", to_float(y_infer)).act(dims);
    f.bind = [sh](Bound& b) {
      return BatchnormForwardInfer{b.ctx(),           sh, b.in("x"), b.f32("gamma"), b.f32("beta"), b.f32("running_mean"),
                                   b.f32("running_var"), b.out("y")};
    };
    out.infer.push_back(f);
    Case<BatchnormBackward> g{batchnorm_label(z)};
    g.in("x", in.x).act(dims).in("gamma", in.gamma).in("save_mean", to_float(mean));
    g.in("save_inv_std", to_float(inv_std)).in("dy", in.dy).act(dims).optional_out("dx", to_float(dx)).act(dims);
    g.optional_out("dgamma", to_float(dgamma));
    g.optional_out("dbeta", to_float(dbeta));
    g.bind = [sh](Bound& b) {
      return BatchnormBackward{b.ctx(),   sh,          b.in("x"),          b.f32("gamma"),      b.f32("save_mean"),
                               b.f32("save_inv_std"), b.in("dy"), b.out("dx"), b.f32_out("dgamma"), b.f32_out("dbeta")};
    };
    out.backward.push_back(g);
  }
  return out;
}

struct PhasedCases {
  std::vector<Case<BatchnormForwardStats>> stats;
  std::vector<Case<BatchnormForwardApply>> apply;
  std::vector<Case<BatchnormForwardInferAct>> infer;
  std::vector<Case<BatchnormBackwardStats>> backward_stats;
  std::vector<Case<BatchnormBackwardApply>> backward_apply;
  std::vector<Case<BatchnormForwardTrainAct>> train_act;
  std::vector<Case<BatchnormBackwardAct>> backward_act;
};

PhasedCases cases_batchnorm_phased() {
  PhasedCases out;
  const std::optional<ActivationParams> acts[] = {std::nullopt,
                                                  ActivationParams{ActivationKind::relu, 0.0f},
                                                  ActivationParams{ActivationKind::leaky_relu, 0.2f},
                                                  ActivationParams{ActivationKind::elu, 0.5f},
                                                  ActivationParams{ActivationKind::sigmoid, 0.0f},
                                                  ActivationParams{ActivationKind::tanh, 0.0f}};
  const BatchnormSize sizes[] = {{2, 3, 1, 1, 0}, {1, 3, 5, 7, 0},       {4, 16, 7, 9, 0},  {3, 5, 4, 4, 0},
                                 {2, 3, 9, 9, 100.0f}, {64, 33, 1, 1, 0}, {8, 8, 24, 24, 0}, {2, 64, 24, 24, 3.0f},
                                 {10, 7, 10, 10, 0},   {4, 16, 40, 40, 0}, {4, 128, 5, 5, 0}};
  for (const BatchnormSize& z : sizes)
    for (const std::optional<ActivationParams>& act : acts) {
      const BatchnormShape sh = make_batchnorm_shape(z.N, z.C, z.H, z.W);
      const BatchnormInputs in = batchnorm_inputs(z);
      const size_t n = in.x.size(), C = in.gamma.size(), S = 2 * C + 1;
      const std::string label = batchnorm_label(z) + (act ? std::string(" ") + to_string(act->kind) : "");
      const std::vector<int64_t> dims{z.N, z.C, z.H, z.W};
      // A pointer to the activation that lives in the bind function itself.
      auto act_of = [](const std::optional<ActivationParams>& a) { return a ? &*a : nullptr; };
      Case<BatchnormForwardStats> st{label};
      st.in("x", in.x).act(dims).in("running_mean", in.running_mean).doubles("stats", Operand::Kind::out, std::vector<double>(S));
      st.bind = [sh](Bound& b) {
        return BatchnormForwardStats{b.ctx(), sh, b.in("x"), b.f32("running_mean"), b.f64("stats")};
      };
      expect_cpu_row(st);
      out.stats.push_back(st);
      Case<BatchnormForwardApply> ap{label};
      ap.doubles("stats", Operand::Kind::in, st.operand("stats").doubles);
      ap.in("x", in.x).act(dims).in("gamma", in.gamma).in("beta", in.beta).out("y", zeros(n)).act(dims);
      ap.inout("running_mean", in.running_mean, zeros(C)).inout("running_var", in.running_var, zeros(C));
      ap.out("save_mean", zeros(C)).out("save_inv_std", zeros(C));
      ap.bind = [sh, act, act_of](Bound& b) {
        return BatchnormForwardApply{b.ctx(),           sh,          b.f64("stats"), b.in("x"), b.f32("gamma"),
                                     b.f32("beta"),     act_of(act), b.out("y"),     b.f32_out("running_mean"),
                                     b.f32_out("running_var"), b.f32_out("save_mean"), b.f32_out("save_inv_std")};
      };
      expect_cpu_row(ap);
      out.apply.push_back(ap);
      Case<BatchnormForwardInferAct> inf{label};
      inf.in("x", in.x).act(dims).in("gamma", in.gamma).in("beta", in.beta).in("running_mean", in.running_mean);
      inf.in("running_var", in.running_var).out("y", zeros(n)).act(dims);
      inf.bind = [sh, act, act_of](Bound& b) {
        return BatchnormForwardInferAct{b.ctx(), sh, b.in("x"), b.f32("gamma"), b.f32("beta"), b.f32("running_mean"),
                                        b.f32("running_var"), act_of(act), b.out("y")};
      };
      expect_cpu_row(inf);
      out.infer.push_back(inf);
      // The saved output as a bf16 layer keeps it (rounded), so the bf16 rows read the oracle's y.
      const std::vector<float> y = bf16_exact(ap.operand("y").values), mean = ap.operand("save_mean").values,
                               inv_std = ap.operand("save_inv_std").values;
      // The backward cases give beta: relu and leaky_relu rows that honour it take act' from z
      // recomputed from x (ops/batchnorm.h), the f32 NCHW cuda rows from y. The two agree but where
      // z is within rounding of 0 (y from the cpu forward's own z, and flushed below 2^-14 by
      // bf16_exact), so dy is 0 where |z| < 2^-12: g is 0 there either way.
      std::vector<float> dy = in.dy;
      if (batchnorm_sign_only(act_of(act)))
        for (size_t i = 0; i < n; ++i) {
          const size_t c = i / size_t(z.H * z.W) % C;
          const float pre = batchnorm_pre_activation(in.x[i], mean[c], batchnorm_saved_scale(in.gamma[c], inv_std[c]),
                                                     in.beta[c]);
          if (std::fabs(pre) < 0x1p-12f) dy[i] = 0.0f;
        }
      Case<BatchnormBackwardStats> bs{label};
      bs.in("x", in.x).act(dims).in("y", y).act(dims).in("save_mean", mean).in("save_inv_std", inv_std);
      bs.in("dy", dy).act(dims).in("gamma", in.gamma).in("beta", in.beta);
      bs.doubles("sums", Operand::Kind::out, std::vector<double>(S));
      bs.optional_out("dgamma", zeros(C)).optional_out("dbeta", zeros(C));
      bs.bind = [sh, act, act_of](Bound& b) {
        return BatchnormBackwardStats{b.ctx(),           sh,         b.in("x"),         b.in("y"),
                                      act_of(act),       b.f32("save_mean"), b.f32("save_inv_std"), b.in("dy"),
                                      b.f64("sums"),     b.f32_out("dgamma"), b.f32_out("dbeta"), b.f32("gamma"),
                                      b.f32("beta")};
      };
      expect_cpu_row(bs);
      out.backward_stats.push_back(bs);
      Case<BatchnormBackwardApply> ba{label};
      ba.doubles("sums", Operand::Kind::in, bs.operand("sums").doubles);
      ba.in("x", in.x).act(dims).in("y", y).act(dims).in("gamma", in.gamma).in("save_mean", mean);
      ba.in("save_inv_std", inv_std).in("dy", dy).act(dims).optional_out("dx", zeros(n)).act(dims);
      ba.in("beta", in.beta);
      ba.bind = [sh, act, act_of](Bound& b) {
        return BatchnormBackwardApply{b.ctx(),      sh,         b.f64("sums"),    b.in("x"),
                                      b.in("y"),    act_of(act), b.f32("gamma"), b.f32("save_mean"),
                                      b.f32("save_inv_std"), b.in("dy"), b.out("dx"), b.f32("beta")};
      };
      expect_cpu_row(ba);
      out.backward_apply.push_back(ba);
      // The one-rank pairs (both phases in one call): the same operands, the stats (sums) written.
      Case<BatchnormForwardTrainAct> ta{label};
      ta.in("x", in.x).act(dims).in("gamma", in.gamma).in("beta", in.beta).out("y", zeros(n)).act(dims);
      ta.inout("running_mean", in.running_mean, zeros(C)).inout("running_var", in.running_var, zeros(C));
      ta.out("save_mean", zeros(C)).out("save_inv_std", zeros(C));
      ta.doubles("stats", Operand::Kind::out, std::vector<double>(S));
      ta.bind = [sh, act, act_of](Bound& b) {
        return BatchnormForwardTrainAct{b.ctx(),           sh,           b.in("x"),
                                        b.f32("gamma"),    b.f32("beta"), act_of(act),
                                        b.out("y"),        b.f32_out("running_mean"), b.f32_out("running_var"),
                                        b.f32_out("save_mean"), b.f32_out("save_inv_std"), b.f64("stats")};
      };
      expect_cpu_row(ta);
      out.train_act.push_back(ta);
      Case<BatchnormBackwardAct> bb{label};
      bb.in("x", in.x).act(dims).in("y", y).act(dims).in("gamma", in.gamma).in("save_mean", mean);
      bb.in("save_inv_std", inv_std).in("dy", dy).act(dims).in("beta", in.beta);
      bb.doubles("sums", Operand::Kind::out, std::vector<double>(S));
      bb.optional_out("dx", zeros(n)).act(dims).optional_out("dgamma", zeros(C)).optional_out("dbeta", zeros(C));
      bb.bind = [sh, act, act_of](Bound& b) {
        return BatchnormBackwardAct{b.ctx(),      sh,           b.in("x"),         b.in("y"),
                                    act_of(act),  b.f32("gamma"), b.f32("save_mean"), b.f32("save_inv_std"),
                                    b.in("dy"),   b.f64("sums"), b.out("dx"),      b.f32_out("dgamma"),
                                    b.f32_out("dbeta"), b.f32("beta")};
      };
      expect_cpu_row(bb);
      out.backward_act.push_back(bb);
    }
  return out;
}

}  // namespace

TEST_CASE("backend ops: every cpu row of batchnorm matches the reference", "[cpu]") {
  const BatchnormCases c = cases_batchnorm();
  check_family(false, c.train, c.infer, c.backward);
}
TEST_CASE("backend ops: every gpu row of batchnorm matches the reference", "[gpu]") {
  CNN_REQUIRE_GPU();
  const BatchnormCases c = cases_batchnorm();
  check_family(true, c.train, c.infer, c.backward);
}

// The cpu f32 row is its own oracle here; the cpu bf16 row (the emulation) is checked against it.
TEST_CASE("backend ops: every cpu row of the phased batchnorm matches the cpu f32 row", "[cpu]") {
  const PhasedCases c = cases_batchnorm_phased();
  check_family(false, c.stats, c.apply, c.infer, c.backward_stats, c.backward_apply, c.train_act, c.backward_act);
}
TEST_CASE("backend ops: every gpu row of the phased batchnorm matches the cpu row", "[gpu]") {
  CNN_REQUIRE_GPU();
  const PhasedCases c = cases_batchnorm_phased();
  check_family(true, c.stats, c.apply, c.infer, c.backward_stats, c.backward_apply, c.train_act, c.backward_act);
}

