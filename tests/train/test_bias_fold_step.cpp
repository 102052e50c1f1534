// Training steps with the conv bias folded into the following batchnorm (train.fold_conv_bias,
// Graph::fold_conv_biases) against the same model with it off: losses, gradients (the conv bias's
// db included: exactly zero folded), parameters and running statistics step by step, evaluation outputs, and a
// checkpoint written with fold on evaluated with fold off (the running mean keeps its meaning).
// On the CPU in bf16 (the emulation), tf32 and fp32 forced through the graph's test switch; fp32 by
// default is not folded and stays bit for bit. On the GPU in bf16, where the folded conv's forward
// shape (bias-free) lets cuDNN's bf16 forward rows run it.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_state.h"
#include "checkpoint/safetensors.h"
#include "config/model_spec.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "layers/conv_plan.h"
#include "model/model_stack.h"
#include "ops/conv2d_algo.h"
#include "support/catch.h"
#include "support/step_run.h"
#include "support/test_util.h"
#include "tune/autotune.h"

using namespace cnn;

namespace {

using test::rel_l2;
using test::same_bits;

// vgg_fer's pattern, small: conv (with bias) -> batchnorm -> relu, twice, then pool and dense.
const char* kModel =
    "name: folded\n"
    "input: {channels: 2, height: 8, width: 8}\n"
    "classes: [a, b, c]\n"
    "layers:\n"
    "  - {name: conv1, type: conv2d, filters: 8, kernel: 3, padding: 1}\n"
    "  - {name: bn1, type: batchnorm}\n"
    "  - {name: relu1, type: relu}\n"
    "  - {name: conv2, type: conv2d, filters: 8, kernel: 3, padding: 1}\n"
    "  - {name: bn2, type: batchnorm}\n"
    "  - {name: relu2, type: relu}\n"
    "  - {name: pool, type: maxpool, kernel: 2}\n"
    "  - {name: flat, type: flatten}\n"
    "  - {name: fc, type: dense, units: 3}\n"
    "train:\n"
    "  deterministic: true\n"
    "  batch_size: 8\n"
    "  optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n";

constexpr int64_t kBatch = 8;
constexpr int kSteps = 6;

struct FoldRun : test::StepRun {
  // force_fp32: fold through the graph's test switch (fp32 layers are never folded otherwise).
  // tune: the autotuner chooses the conv algorithms (no disk cache), as a training run's would.
  FoldRun(const std::string& device, const std::string& precision, bool fold, bool force_fp32 = false,
          bool tune = false)
      : StepRun(parse_model_text(kModel, "folded.yaml",
                                 {"train.precision=" + precision,
                                  std::string("train.fold_conv_bias=") + (fold ? "true" : "false")}),
                kBatch, 3) {
    if (force_fp32) stack.graph().fold_conv_biases(fold, true);
    stack.place(device, true);
    if (tune) stack.autotune(kBatch, AutotuneOptions{});
    build_executor(5);
    // Conv biases far from zero (they start at zero), so folding them moves real numbers.
    std::vector<float> p = stack.executor().params().to_vector();
    Rng rng(17, static_cast<uint64_t>(RngStream::test));
    for (const ParamEntry& e : stack.graph().params())
      if (e.name == "conv1.bias" || e.name == "conv2.bias")
        for (int64_t i = 0; i < e.shape.numel(); ++i) p[size_t(e.offset + i)] = 1.5f * rng.normal();
    stack.executor().params().copy_from(Tensor::from_vector(stack.executor().params().shape(), p));
    build_step();
  }
  std::string folded() const { return stack.graph().folded_bias_pairs(); }
};

// The entries of v that belong to parameter `name` of the graph's flat layout.
std::vector<float> slice(const FoldRun& r, const std::vector<float>& v, const std::string& name) {
  for (const ParamEntry& e : r.stack.graph().params())
    if (e.name == name) return {v.begin() + e.offset, v.begin() + e.offset + e.shape.numel()};
  FAIL("no parameter " << name);
  return {};
}

// ||a - b|| (b empty: ||a||).
double l2_distance(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE((b.empty() || a.size() == b.size()));
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double e = double(a[i]) - (b.empty() ? 0.0 : double(b[i]));
    d += e * e;
  }
  return std::sqrt(d);
}

// Relative L2 distances allowed between the fold-on and fold-off runs: of the gradients, and of
// everything else (losses, parameters, running statistics, evaluation outputs).
struct FoldTolerance {
  double grads, rest;
};

// Fold on against fold off, step by step.
void check_fold_agrees(FoldRun& on, FoldRun& off, FoldTolerance t) {
  const double tol = t.rest;
  REQUIRE(on.folded() == "conv1 -> bn1, conv2 -> bn2");
  REQUIRE(off.folded().empty());
  for (uint64_t s = 0; s < kSteps; ++s) {
    INFO("step " << s);
    const double a = on.run(s), b = off.run(s);
    REQUIRE(std::isfinite(a));
    CHECK(std::abs(a - b) <= tol * std::abs(b));
    const std::vector<float> ga = on.grads(), gb = off.grads();
    CHECK(rel_l2(ga, gb) <= t.grads);
    // db of a conv before a training batchnorm is zero but for rounding (the batchnorm's dx sums to
    // zero per channel), so off's is held to the scale of the whole gradient, not its own; folded,
    // it is exactly zero (the conv computes none).
    for (const char* db : {"conv1.bias", "conv2.bias"}) {
      INFO(db);
      CHECK(l2_distance(slice(on, ga, db), slice(off, gb, db)) <= t.grads * l2_distance(gb, {}));
      CHECK(l2_distance(slice(on, ga, db), {}) == 0.0);
    }
    CHECK(rel_l2(on.params(), off.params()) <= tol);
    const std::vector<float> ba = on.buffers(), bb = off.buffers();
    for (const char* buf : {"bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"}) {
      INFO(buf);
      CHECK(rel_l2(slice(on, ba, buf), slice(off, bb, buf)) <= tol);
    }
  }
  // The running means hold the biases (they moved well away from the zero they started at).
  double norm = 0;
  for (float v : slice(on, on.buffers(), "bn1.running_mean")) norm += double(v) * v;
  CHECK(norm > 0.1);
  CHECK(rel_l2(on.eval(0), off.eval(0)) <= tol);
}

// A checkpoint of `on` (fold on) loaded into a fold-off model of the same spec evaluates the same.
void check_checkpoint_crosses(FoldRun& on, FoldRun& off, double tol) {
  test::TempDir dir;
  const std::string path = (dir / "folded.safetensors").string();
  CheckpointMeta meta;
  meta.config_yaml = to_yaml(on.spec.config);
  meta.seed = on.spec.train.seed;
  on.stack.device().synchronize();
  write_checkpoint(path, on.stack.executor(), nullptr, meta);
  load_weights(off.stack.executor(), SafetensorsFile::open(path), true);
  CHECK(rel_l2(off.eval(3), on.eval(3)) <= tol);
}

// bf16: on and off round different values (the conv output with and without its bias) once into
// bf16 before the batchnorm, and the difference goes through relu and max-pool choices: measured
// on the CPU emulation here, the gradients of the two runs differ by up to 6.5% (relative L2) in a
// step, about as much as either differs from the fp32 run (up to 10%); losses, parameters, running
// statistics and evaluation outputs stay within 3%.
constexpr FoldTolerance kBf16Fold{0.15, 3e-2};
// FP32 storage: only the float rounding of the bias added or subtracted differs.
constexpr FoldTolerance kF32Fold{1e-4, 1e-4};

}  // namespace

TEST_CASE("bf16 training with the conv bias folded agrees with it unfolded on the cpu emulation", "[cpu]") {
  FoldRun on("cpu", "bf16", true), off("cpu", "bf16", false);
  check_fold_agrees(on, off, kBf16Fold);
  FoldRun fresh_off("cpu", "bf16", false);
  check_checkpoint_crosses(on, fresh_off, kBf16Fold.rest);
}

TEST_CASE("tf32 and forced fp32 training with the conv bias folded agree with it unfolded on the cpu", "[cpu]") {
  {
    FoldRun on("cpu", "tf32", true), off("cpu", "tf32", false);
    check_fold_agrees(on, off, kF32Fold);
    FoldRun fresh_off("cpu", "tf32", false);
    check_checkpoint_crosses(on, fresh_off, kF32Fold.rest);
  }
  FoldRun on("cpu", "fp32", true, true), off("cpu", "fp32", false);
  check_fold_agrees(on, off, kF32Fold);
}

TEST_CASE("fp32 training is not folded by default and stays bit for bit as with fold off", "[cpu]") {
  FoldRun dflt("cpu", "fp32", true), off("cpu", "fp32", false);
  CHECK(dflt.folded().empty());
  for (uint64_t s = 0; s < 3; ++s) CHECK(dflt.run(s) == off.run(s));
  CHECK(same_bits(dflt.params(), off.params()));
  CHECK(same_bits(dflt.grads(), off.grads()));
  CHECK(same_bits(dflt.buffers(), off.buffers()));
  CHECK(same_bits(dflt.eval(0), off.eval(0)));
}

TEST_CASE("bf16 training on cuda with the conv bias folded agrees with it unfolded, and cuDNN can run the forward",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  FoldRun on("cuda", "bf16", true), off("cuda", "bf16", false);
  for (const char* name : {"conv1", "conv2"}) {
    INFO(name);
    int node = -1;
    for (int i = 0; i < on.stack.graph().size(); ++i)
      if (on.stack.graph().node(i).layer->name() == name) node = i;
    REQUIRE(node >= 0);
    const Layer& l = *on.stack.graph().node(node).layer;
    REQUIRE(l.dtype() == DType::bf16);
    const Conv2dShape fwd = l.conv_planned()->conv_shape(kBatch, ConvDir::forward);
    CHECK_FALSE(fwd.has_bias);  // the shape the layer's forward (and the autotuner) hands the rows
    // The folded bias's gradient is zero, so the filter gradient's rows run bias-free too.
    CHECK_FALSE(l.conv_planned()->conv_shape(kBatch, ConvDir::backward_filter).has_bias);
    bool cudnn_can = false;
    for (const ConvAlgo& a : conv2d_algos(ConvDir::forward))
      if (a.backend == Backend::cudnn && a.dtype == DType::bf16 && a.can_implement(on.stack.ctx(), fwd, l.math()))
        cudnn_can = true;
    CHECK(cudnn_can);
  }
  check_fold_agrees(on, off, kBf16Fold);
  FoldRun fresh_off("cuda", "bf16", false);
  check_checkpoint_crosses(on, fresh_off, kBf16Fold.rest);
}

TEST_CASE("bf16 training on cuda with the conv bias folded and the algorithms autotuned agrees with it unfolded",
          "[gpu]") {
  CNN_REQUIRE_GPU();
  // The autotuner times and checks the folded conv on bias-free probe operands in every direction
  // (the folded bias's gradient is zero), cuDNN's bf16 forward rows among the candidates.
  FoldRun on("cuda", "bf16", true, false, true), off("cuda", "bf16", false, false, true);
  for (int i = 0; i < on.stack.graph().size(); ++i) {
    const Layer& l = *on.stack.graph().node(i).layer;
    const ConvPlanned* planned = l.conv_planned();
    if (!planned) continue;
    INFO(l.name());
    for (ConvDir d : kConvDirs) {
      INFO(to_string(d));
      const ConvAlgo* a = planned->conv_plan().algo(d);
      REQUIRE(a);
      CHECK(a->dtype == DType::bf16);
      CHECK(a->can_implement(on.stack.ctx(), planned->conv_shape(kBatch, d), l.math()));
    }
  }
  check_fold_agrees(on, off, kBf16Fold);
}
