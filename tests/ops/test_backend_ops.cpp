// The cross-backend op harness (after ggml's test-backend-ops): for every entry point of every op,
// every row of its table (backend x dtype x named strategy) runs over generated shapes (odd sizes,
// N = 1, every stride/padding/dilation/groups combination the op allows) against the CPU oracle:
// the *_reference templates in double (or float where they compute the same sums), and the cpu row
// for the phased batchnorm ops, which have no reference (test_batchnorm_phased.cpp checks that row).
// Each op has a [cpu] test (its cpu rows) and a [gpu] test (its cuda and cudnn rows; skipped
// without a GPU). Machinery: support/op_harness.h; conv2d and batchnorm have their case files
// (test_backend_ops_conv2d.cpp, test_backend_ops_batchnorm.cpp).
//
// Adding an op: write a cases_<op>() function that makes Case<Args> for each entry point (inputs,
// the oracle's outputs, bind()), then a [cpu] and a [gpu] TEST_CASE that call check_family. A new
// row in registry.cpp needs nothing here: it is found in the table. A row of another dtype needs the
// harness's conversion and its tolerance (op_harness.h: require_bindable, row_tolerance).
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ops/activation.h"
#include "ops/add.h"
#include "ops/concat.h"
#include "ops/dense.h"
#include "ops/dropout.h"
#include "ops/pool2d.h"
#include "ops/softmax_cross_entropy.h"
#include "support/op_harness.h"

using namespace cnn;
using namespace cnn::test;

namespace {

// ---- activation ----

struct ActivationCases {
  std::vector<Case<ActivationForward>> forward;
  std::vector<Case<ActivationBackward>> backward;
  std::vector<Case<ActivationBackwardFromOutput>> from_output;
};

ActivationCases cases_activation() {
  ActivationCases out;
  const ActivationParams params[] = {{ActivationKind::relu, 0.0f},    {ActivationKind::leaky_relu, 0.2f},
                                     {ActivationKind::elu, 0.2f},     {ActivationKind::elu, 1.0f},
                                     {ActivationKind::sigmoid, 0.0f}, {ActivationKind::tanh, 0.0f}};
  for (const ActivationParams& p : params)
    for (int64_t n : {1, 3, 4, 5, 7, 64, 1001, 4096, 65537}) {
      const std::string label = fmt::format("{} alpha {} n={}", to_string(p.kind), p.alpha, n);
      std::vector<float> x = bf16_exact(random_floats(size_t(n), 100 + n, -4.0f, 4.0f));
      x[0] = 0.0f;  // the kink: every row must take the same side as the reference
      const std::vector<float> dy = bf16_exact(random_floats(size_t(n), 200 + n));
      std::vector<float> y(x.size()), dx(x.size());
      activation_forward_reference(oracle_ctx(), p, n, x.data(), y.data());
      // Backward takes y as a bf16 forward stored it; every row gets the same (bf16-exact) y.
      const std::vector<float> y_stored = bf16_exact(y);
      activation_backward_reference(oracle_ctx(), p, n, x.data(), y_stored.data(), dy.data(), dx.data());
      Case<ActivationForward> f{label};
      f.in("x", x).act({n}).out("y", y).act({n});
      f.aliases = {{"y", "x"}};
      f.bind = [p, n](Bound& b) { return ActivationForward{b.ctx(), p, n, b.in("x"), b.out("y")}; };
      out.forward.push_back(f);
      Case<ActivationBackward> g{label};
      g.in("x", x).act({n}).in("y", y_stored).act({n}).in("dy", dy).act({n}).out("dx", dx).act({n});
      g.aliases = {{"dx", "dy"}};
      g.bind = [p, n](Bound& b) {
        return ActivationBackward{b.ctx(), p, n, b.in("x"), b.in("y"), b.in("dy"), b.out("dx")};
      };
      out.backward.push_back(g);
      if (!activation_fusable(p)) continue;
      Case<ActivationBackwardFromOutput> h{label};
      h.in("y", y_stored).act({n}).in("dy", dy).act({n}).out("dx", dx).act({n});
      h.aliases = {{"dx", "dy"}};
      h.bind = [p, n](Bound& b) {
        return ActivationBackwardFromOutput{b.ctx(), p, n, b.in("y"), b.in("dy"), b.out("dx")};
      };
      out.from_output.push_back(h);
    }
  return out;
}

// ---- dense ----

// Every size mix of N, C, K with and without a bias, and one batch past the bf16 bias gradient's
// 512-row chunk (column_sum_bf16.h).
std::pair<std::vector<Case<DenseForward>>, std::vector<Case<DenseBackward>>> cases_dense() {
  std::vector<Case<DenseForward>> fwd;
  std::vector<Case<DenseBackward>> bwd;
  uint64_t seed = 30;
  auto add = [&](int64_t N, int64_t C, int64_t K, bool bias) {
    const DenseShape sh{N, C, K, bias};
    const std::string label = fmt::format("N={} C={} K={}{}", N, C, K, bias ? " bias" : "");
    // bf16-exact, so the bf16 rows (which round w too) read what the oracle read
    const std::vector<float> x = bf16_exact(random_floats(size_t(N * C), ++seed)),
                             w = bf16_exact(random_floats(size_t(K * C), ++seed)),
                             b = bf16_exact(random_floats(size_t(K), ++seed)),
                             dy = bf16_exact(random_floats(size_t(N * K), ++seed));
    const std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(b), dyd = to_double(dy);
    std::vector<double> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
    dense_forward_reference<double>(oracle_ctx(), sh, xd.data(), wd.data(), bias ? bd.data() : nullptr, y.data());
    dense_backward_reference<double>(oracle_ctx(), sh, xd.data(), wd.data(), dyd.data(), dx.data(), dw.data(),
                                     db.data());
    Case<DenseForward> f{label};
    f.in("x", x).act({N, C}).in("w", w).in("b", b).out("y", to_float(y)).act({N, K});
    f.bind = [sh](Bound& t) {
      return DenseForward{t.ctx(), sh, t.in("x"), t.in("w"), sh.has_bias ? t.in("b") : nullptr, t.out("y")};
    };
    fwd.push_back(f);
    Case<DenseBackward> g{label};
    g.in("x", x).act({N, C}).in("w", w).in("dy", dy).act({N, K}).optional_out("dx", to_float(dx)).act({N, C});
    g.optional_out("dw", to_float(dw));
    if (bias) g.optional_out("db", to_float(db));
    g.bind = [sh](Bound& t) {
      return DenseBackward{t.ctx(), sh, t.in("x"), t.in("w"), t.in("dy"), t.out("dx"), t.out("dw"),
                           sh.has_bias ? t.out("db") : nullptr};
    };
    bwd.push_back(g);
  };
  for (int64_t N : {1, 3, 64})
    for (int64_t C : {1, 5, 128, 301})
      for (int64_t K : {1, 7, 64})
        for (bool bias : {true, false}) add(N, C, K, bias);
  add(600, 40, 24, true);
  return {fwd, bwd};
}

// ---- pool2d ----

std::pair<std::vector<Case<Pool2dForward>>, std::vector<Case<Pool2dBackward>>> cases_pool2d() {
  std::vector<Pool2dShape> shapes;
  struct Size {
    int64_t N, C, H, W;
  };
  const int strides[][2] = {{1, 1}, {2, 2}, {1, 3}, {3, 2}};
  for (PoolKind kind : {PoolKind::max, PoolKind::avg}) {
    // 16 channels: the bf16 cuda row's 8-channel accesses.
    for (const Size& z : {Size{1, 1, 5, 7}, Size{2, 3, 8, 9}, Size{1, 2, 13, 6}, Size{2, 16, 6, 7}})
      for (int64_t R : {1, 2, 3, 4})
        for (int64_t S : {1, 2, 3})
          for (const auto& st : strides)
            for (int pad : {0, 1}) {
              const int ph = pad ? int(R / 2) : 0, pw = pad ? int(S / 2) : 0;
              if (R > z.H + 2 * ph || S > z.W + 2 * pw) continue;
              shapes.push_back(Pool2dShape::make(kind, z.N, z.C, z.H, z.W, R, S, st[0], st[1], ph, pw));
            }
    // Global pooling, small and large planes.
    for (const Size& z : {Size{1, 1, 1, 1}, Size{1, 5, 7, 7}, Size{3, 17, 5, 9}, Size{2, 4, 33, 31}, Size{64, 64, 7, 7},
                          Size{2, 24, 48, 48}, Size{3, 72, 5, 3}})
      shapes.push_back(Pool2dShape::make(kind, z.N, z.C, z.H, z.W, z.H, z.W, int(z.H), int(z.W)));
  }
  // Max pools over several of the bf16 cuda row's tiles (up to 8 x 8 outputs each, pool2d_nhwc_bf16_cuda.cu),
  // so windows straddle tile edges: 16 and 40 channels (40: a slice of 4 groups of 8 and one of 1),
  // 12 (the scalar path), odd sizes, overlapping windows (stride below the window: a halo of 1 or 2
  // windows, 4 at 5x5 stride 1), and windows of more than 255 positions (the gather kernel instead).
  for (const Size& z : {Size{2, 16, 19, 18}, Size{1, 40, 21, 17}, Size{2, 12, 20, 23}})
    for (int64_t R : {2, 3})
      for (int64_t S : {2, 3})
        for (const auto& st : strides)
          for (int pad : {0, 1})
            shapes.push_back(Pool2dShape::make(PoolKind::max, z.N, z.C, z.H, z.W, R, S, st[0], st[1],
                                               pad ? int(R / 2) : 0, pad ? int(S / 2) : 0));
  shapes.push_back(Pool2dShape::make(PoolKind::max, 2, 16, 37, 35, 3, 3, 2, 2, 1, 1));  // mini_xception's pools
  shapes.push_back(Pool2dShape::make(PoolKind::max, 1, 8, 23, 22, 5, 5, 1, 1, 2, 2));
  shapes.push_back(Pool2dShape::make(PoolKind::max, 1, 16, 40, 40, 16, 16, 1, 1, 0, 0));
  // 255 positions: the largest window the tiled kernel takes.
  shapes.push_back(Pool2dShape::make(PoolKind::max, 1, 8, 20, 21, 15, 17, 1, 1, 0, 0));
  const size_t relu_from = shapes.size();  // the shapes below get ReLU-like inputs: ties of zeros everywhere
  shapes.push_back(Pool2dShape::make(PoolKind::max, 2, 16, 37, 35, 3, 3, 2, 2, 1, 1));
  shapes.push_back(Pool2dShape::make(PoolKind::max, 2, 24, 34, 31, 2, 2, 2, 2, 0, 0));  // vgg_fer's pools
  // 2x2 stride 2 windows covering the plane exactly (the cpu row's 2x2 path writes every dx once)
  shapes.push_back(Pool2dShape::make(PoolKind::max, 2, 8, 24, 16, 2, 2, 2, 2, 0, 0));
  shapes.push_back(Pool2dShape::make(PoolKind::max, 1, 13, 19, 21, 3, 3, 2, 2, 1, 1));
  std::vector<Case<Pool2dForward>> fwd;
  std::vector<Case<Pool2dBackward>> bwd;
  uint64_t seed = 1;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const Pool2dShape& sh = shapes[k];
    // Every other shape on a coarse grid (multiples of 0.25), so windows hold ties.
    std::vector<float> x = random_floats(size_t(sh.N * sh.C * sh.H * sh.W), ++seed);
    if (seed % 2 || k >= relu_from)
      for (float& v : x) v = std::round(v * 4.0f) / 4.0f;
    if (k >= relu_from)
      for (float& v : x) v = std::max(v, 0.0f);
    x = bf16_exact(x);
    const std::vector<float> dy = bf16_exact(random_floats(size_t(sh.N * sh.C * sh.P * sh.Q), ++seed));
    const std::vector<double> xd = to_double(x), dyd = to_double(dy);
    std::vector<double> y(dy.size()), dx(x.size());
    pool2d_forward_reference<double>(oracle_ctx(), sh, xd.data(), y.data());
    pool2d_backward_reference<double>(oracle_ctx(), sh, xd.data(), y.data(), dyd.data(), dx.data());
    const std::vector<int64_t> in_dims{sh.N, sh.C, sh.H, sh.W}, out_dims{sh.N, sh.C, sh.P, sh.Q};
    Case<Pool2dForward> f{sh.to_string()};
    f.in("x", x).act(in_dims).out("y", to_float(y)).act(out_dims);
    f.bind = [sh](Bound& b) { return Pool2dForward{b.ctx(), sh, b.in("x"), b.out("y")}; };
    fwd.push_back(f);
    Case<Pool2dBackward> g{sh.to_string()};
    // y as a bf16 forward stores it: a max is one of the inputs (exact); avg backward ignores y.
    g.in("x", x).act(in_dims).in("y", bf16_exact(to_float(y))).act(out_dims).in("dy", dy).act(out_dims);
    g.out("dx", to_float(dx)).act(in_dims);
    g.bind = [sh](Bound& b) { return Pool2dBackward{b.ctx(), sh, b.in("x"), b.in("y"), b.in("dy"), b.out("dx")}; };
    bwd.push_back(g);
  }
  return {fwd, bwd};
}

// ---- add, concat, dropout: no arithmetic beyond the CPU's own, so every f32 row agrees exactly (a
// bf16 row rounds a sum or a scaled value once) ----

std::string indexed(const char* name, size_t i) { return fmt::format("{}{}", name, i); }

std::pair<std::vector<Case<AddForward>>, std::vector<Case<AddBackward>>> cases_add() {
  std::vector<Case<AddForward>> fwd;
  std::vector<Case<AddBackward>> bwd;
  for (int count : {1, 2, 3, 5, 64})
    for (int64_t n : {1, 3, 4, 5, 1001, 4096, 70001}) {
      const std::string label = fmt::format("{} inputs n={}", count, n);
      std::vector<std::vector<float>> xs;
      std::vector<const float*> ptrs;
      for (int k = 0; k < count; ++k) xs.push_back(bf16_exact(random_floats(size_t(n), 1000 * k + n)));
      for (const auto& x : xs) ptrs.push_back(x.data());
      std::vector<float> y = zeros(size_t(n));
      add_forward_reference(oracle_ctx(), n, count, ptrs.data(), y.data());
      Case<AddForward> f{label};
      for (int k = 0; k < count; ++k) f.in(indexed("x", k), xs[k]).act({n});
      f.out("y", y).act({n});
      f.aliases = {{"y", indexed("x", count - 1)}};
      f.tolerance = kExact;
      f.bind = [n, count](Bound& b) {
        std::vector<ConstView> v;
        for (int k = 0; k < count; ++k) v.push_back(b.in(indexed("x", k)));
        return AddForward{b.ctx(), n, count, b.keep(v), b.out("y")};
      };
      fwd.push_back(f);
      const std::vector<float> dy = bf16_exact(random_floats(size_t(n), 5 + n));
      Case<AddBackward> g{label};
      g.in("dy", dy).act({n});
      for (int k = 0; k < count; ++k)
        g.add({indexed("dx", k), k == 1 ? Operand::Kind::optional_out : Operand::Kind::out, dy}).act({n});
      g.aliases = {{"dx0", "dy"}};
      g.tolerance = kExact;
      g.bind = [n, count](Bound& b) {
        std::vector<View> v;
        for (int k = 0; k < count; ++k) v.push_back(b.out(indexed("dx", k)));
        return AddBackward{b.ctx(), n, count, b.in("dy"), b.keep(v)};
      };
      bwd.push_back(g);
    }
  return {fwd, bwd};
}

std::pair<std::vector<Case<ConcatForward>>, std::vector<Case<ConcatBackward>>> cases_concat() {
  std::vector<Case<ConcatForward>> fwd;
  std::vector<Case<ConcatBackward>> bwd;
  std::vector<int64_t> twenty;  // more inputs than one launch copies
  for (int i = 0; i < 20; ++i) twenty.push_back(1 + i % 3);
  uint64_t seed = 1;
  for (int64_t N : {1, 3})
    for (int64_t HW : {1, 3, 4, 49, 64})
      for (const std::vector<int64_t>& channels :
           {std::vector<int64_t>{1}, {2, 3}, {1, 1, 1}, {4, 8, 5}, twenty, {8, 16, 8}, {2, 6, 4, 4}}) {
        ConcatShape sh;
        sh.N = N, sh.HW = HW, sh.channels = channels;
        const std::string label = fmt::format("N={} HW={} {} inputs", N, HW, channels.size());
        const size_t parts = channels.size();
        std::vector<std::vector<float>> xs;
        std::vector<const float*> ptrs;
        for (size_t i = 0; i < parts; ++i)
          xs.push_back(bf16_exact(random_floats(size_t(N * channels[i] * HW), ++seed)));
        for (const auto& x : xs) ptrs.push_back(x.data());
        std::vector<float> y(size_t(N * sh.total_channels() * HW));
        concat_forward_reference(oracle_ctx(), sh, ptrs.data(), y.data());
        Case<ConcatForward> f{label};
        // Activations (N, C, H*W, 1): channels-last in bf16, so a bf16 concat interleaves per pixel.
        const std::vector<int64_t> out_dims{N, sh.total_channels(), HW, 1};
        for (size_t i = 0; i < parts; ++i) f.in(indexed("x", i), xs[i]).act({N, channels[i], HW, 1});
        f.out("y", y).act(out_dims);
        f.tolerance = kExact;
        f.bind = [sh](Bound& b) {
          std::vector<ConstView> v;
          for (size_t i = 0; i < sh.channels.size(); ++i) v.push_back(b.in(indexed("x", i)));
          return ConcatForward{b.ctx(), sh, b.keep(v), b.out("y")};
        };
        fwd.push_back(f);
        const std::vector<float> dy = bf16_exact(random_floats(y.size(), ++seed));
        std::vector<std::vector<float>> dxs;
        std::vector<float*> dptrs;
        for (size_t i = 0; i < parts; ++i) dxs.push_back(zeros(xs[i].size()));
        for (auto& d : dxs) dptrs.push_back(d.data());
        concat_backward_reference(oracle_ctx(), sh, dy.data(), dptrs.data());
        Case<ConcatBackward> g{label};
        g.in("dy", dy).act(out_dims);
        for (size_t i = 0; i < parts; ++i)
          g.add({indexed("dx", i), i == parts / 2 ? Operand::Kind::optional_out : Operand::Kind::out, dxs[i]})
              .act({N, channels[i], HW, 1});
        g.tolerance = kExact;
        g.bind = [sh](Bound& b) {
          std::vector<View> v;
          for (size_t i = 0; i < sh.channels.size(); ++i) v.push_back(b.out(indexed("dx", i)));
          return ConcatBackward{b.ctx(), sh, b.in("dy"), b.keep(v)};
        };
        bwd.push_back(g);
      }
  return {fwd, bwd};
}

std::pair<std::vector<Case<DropoutForward>>, std::vector<Case<DropoutBackward>>> cases_dropout() {
  std::vector<Case<DropoutForward>> fwd;
  std::vector<Case<DropoutBackward>> bwd;
  for (float p : {0.0f, 0.1f, 0.5f, 0.9f})
    for (uint64_t counter : {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{4}, uint64_t{7},
                             (uint64_t{1} << 33) + 3})
      for (int64_t n : {1, 2, 3, 4, 5, 9, 1001, 4096, 65539}) {
        const DropoutParams prm{p, uint64_t(1234 + n), counter};
        const std::string label = fmt::format("p={} counter={} n={}", p, counter, n);
        const std::vector<float> x = bf16_exact(random_floats(size_t(n), 40 + n, 0.5f, 1.5f));
        std::vector<float> y(x.size());
        dropout_forward_reference(oracle_ctx(), prm, n, x.data(), y.data());
        Case<DropoutForward> f{label};
        f.in("x", x).act({n}).out("y", y).act({n});  // the mask follows the storage index
        f.aliases = {{"y", "x"}};
        f.tolerance = kExact;
        f.bind = [prm, n](Bound& b) { return DropoutForward{b.ctx(), prm, n, b.in("x"), b.out("y")}; };
        fwd.push_back(f);
        Case<DropoutBackward> g{label};
        g.in("dy", x).act({n}).out("dx", y).act({n});  // the same mask on the gradient
        g.aliases = {{"dx", "dy"}};
        g.tolerance = kExact;
        g.bind = [prm, n](Bound& b) { return DropoutBackward{b.ctx(), prm, n, b.in("dy"), b.out("dx")}; };
        bwd.push_back(g);
      }
  return {fwd, bwd};
}

// ---- softmax cross-entropy ----

struct SoftmaxCases {
  std::vector<Case<SoftmaxCrossEntropyForward>> forward;
  std::vector<Case<SoftmaxCrossEntropyBackward>> backward;
  std::vector<Case<SoftmaxCrossEntropyForwardAsync>> forward_async;
};

SoftmaxCases cases_softmax() {
  SoftmaxCases out;
  uint64_t seed = 10;
  for (int64_t N : {1, 3, 64, 300})
    for (int64_t K : {1, 2, 7, 32, 33, 1000})
      for (float ls : {0.0f, 0.1f})
        for (bool weighted : {false, true})
          for (float scale : {1.0f, 1e4f}) {  // huge logits: max subtraction keeps the loss finite
            const SoftmaxCrossEntropyShape sh{N, K, ls};
            const std::string label = fmt::format("N={} K={} smoothing {}{} logits x{}", N, K, ls,
                                                  weighted ? " weighted" : "", scale);
            std::vector<float> logits = random_floats(size_t(N * K), ++seed, -3.0f, 3.0f);
            for (float& v : logits) v *= scale;
            std::vector<int32_t> labels;
            for (float u : random_floats(size_t(N), ++seed, 0.0f, 1.0f))
              labels.push_back(int32_t(std::min<int64_t>(K - 1, int64_t(u * float(K)))));
            const std::vector<float> weights = random_floats(size_t(K), ++seed, 0.2f, 2.0f);
            const std::vector<double> z = to_double(logits), wd = to_double(weights);
            std::vector<double> probs(z.size()), loss(static_cast<size_t>(N)), dz(z.size());
            const double* w = weighted ? wd.data() : nullptr;
            const double batch = softmax_cross_entropy_forward_reference<double>(oracle_ctx(), sh, z.data(),
                                                                                 labels.data(), w, probs.data(),
                                                                                 loss.data());
            softmax_cross_entropy_backward_reference<double>(oracle_ctx(), sh, probs.data(), labels.data(), w, dz.data());
            // cuDNN's log-softmax was measured on logits up to 8 in size: the huge ones are ours alone.
            auto rows = [scale](std::string_view r) { return scale == 1.0f || r != "cudnn"; };
            Case<SoftmaxCrossEntropyForward> f{label};
            f.labels = labels;
            f.in("logits", logits).in("weights", weights).out("probs", to_float(probs));
            f.optional_out("sample_loss", to_float(loss));
            Operand batch_loss{"batch_loss", Operand::Kind::out};
            batch_loss.doubles = {batch}, batch_loss.is_double = true, batch_loss.host_only = true;
            f.add(batch_loss);
            f.rows = rows;
            f.bind = [sh, weighted](Bound& b) {
              return SoftmaxCrossEntropyForward{b.ctx(), sh, b.in("logits"), b.labels(),
                                                weighted ? b.f32("weights") : nullptr, b.f32_out("probs"),
                                                b.f32_out("sample_loss"), b.f64("batch_loss")};
            };
            out.forward.push_back(f);
            Case<SoftmaxCrossEntropyBackward> g{label};
            g.labels = labels;
            g.in("probs", to_float(probs)).in("weights", weights).out("dlogits", to_float(dz));
            g.rows = rows;
            g.bind = [sh, weighted](Bound& b) {
              return SoftmaxCrossEntropyBackward{b.ctx(), sh, b.f32("probs"), b.labels(),
                                                 weighted ? b.f32("weights") : nullptr, b.out("dlogits")};
            };
            out.backward.push_back(g);
            Case<SoftmaxCrossEntropyForwardAsync> a{label};
            a.labels = labels;
            a.in("logits", logits).in("weights", weights).out("probs", to_float(probs));
            a.optional_out("sample_loss", to_float(loss)).out("batch_loss", {float(batch)});
            a.bind = [sh, weighted](Bound& b) {
              return SoftmaxCrossEntropyForwardAsync{b.ctx(), sh, b.in("logits"), b.labels(),
                                                     weighted ? b.f32("weights") : nullptr, b.f32_out("probs"),
                                                     b.f32_out("sample_loss"), b.f32_out("batch_loss")};
            };
            out.forward_async.push_back(a);
          }
  return out;
}

}  // namespace

TEST_CASE("backend ops: every cpu row of activation matches the reference", "[cpu]") {
  const ActivationCases c = cases_activation();
  check_family(false, c.forward, c.backward, c.from_output);
}
TEST_CASE("backend ops: every gpu row of activation matches the reference", "[gpu]") {
  CNN_REQUIRE_GPU();
  const ActivationCases c = cases_activation();
  check_family(true, c.forward, c.backward, c.from_output);
}

TEST_CASE("backend ops: every cpu row of dense matches the reference", "[cpu]") {
  const auto [fwd, bwd] = cases_dense();
  check_family(false, fwd, bwd);
}
TEST_CASE("backend ops: every gpu row of dense matches the reference", "[gpu]") {
  CNN_REQUIRE_GPU();
  const auto [fwd, bwd] = cases_dense();
  check_family(true, fwd, bwd);
}

TEST_CASE("backend ops: every cpu row of pool2d matches the reference", "[cpu]") {
  const auto [fwd, bwd] = cases_pool2d();
  check_family(false, fwd, bwd);
}
TEST_CASE("backend ops: every gpu row of pool2d matches the reference", "[gpu]") {
  CNN_REQUIRE_GPU();
  const auto [fwd, bwd] = cases_pool2d();
  check_family(true, fwd, bwd);
}

TEST_CASE("backend ops: every cpu row of add, concat and dropout matches the reference exactly", "[cpu]") {
  const auto [add_f, add_b] = cases_add();
  const auto [cat_f, cat_b] = cases_concat();
  const auto [drop_f, drop_b] = cases_dropout();
  check_family(false, add_f, add_b, cat_f, cat_b, drop_f, drop_b);
}
TEST_CASE("backend ops: every gpu row of add, concat and dropout matches the reference exactly", "[gpu]") {
  CNN_REQUIRE_GPU();
  const auto [add_f, add_b] = cases_add();
  const auto [cat_f, cat_b] = cases_concat();
  const auto [drop_f, drop_b] = cases_dropout();
  check_family(true, add_f, add_b, cat_f, cat_b, drop_f, drop_b);
}

TEST_CASE("backend ops: every cpu row of softmax cross-entropy matches the reference", "[cpu]") {
  const SoftmaxCases c = cases_softmax();
  check_family(false, c.forward, c.backward, c.forward_async);
}
TEST_CASE("backend ops: every gpu row of softmax cross-entropy matches the reference", "[gpu]") {
  CNN_REQUIRE_GPU();
  const SoftmaxCases c = cases_softmax();
  check_family(true, c.forward, c.backward, c.forward_async);
}

