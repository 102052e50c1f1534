// The batchnorm layer with bf16 activations (stored channels-last): the layer hands its tensors'
// views to the ops, so its plain, fused-activation and synchronised (phased) paths run the bf16
// rows. On the CPU the bf16 rows emulate the GPU by running the f32 arithmetic on the widened
// tensors, so each bf16 output is exactly the f32 layer's rounded once, and the FP32 results
// (running statistics, dgamma, dbeta) are the f32 layer's bit for bit.
#include <memory>
#include <string>
#include <vector>

#include "config/model_spec.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "layers/registry.h"
#include "ops/convert.h"
#include "support/catch.h"
#include "support/op_harness.h"
#include "support/test_util.h"
#include "support/tolerance.h"

using namespace cnn;
using namespace cnn::test;

namespace {

constexpr int64_t kN = 4, kC = 8, kH = 3, kW = 5;
const ActDims kDims{kN, kC, kH, kW};

// One rank: the sums stay as they are.
class OneRank : public StatsReducer {
public:
  void sum(double*, int64_t, Device) override {}
};

// An activation tensor of dtype t holding `nchw` (bf16: channels-last, each value rounded once).
Tensor activation(const std::vector<float>& nchw, DType t) {
  if (t == DType::f32) return Tensor::from_vector(Shape{kN, kC, kH, kW}, nchw);
  Tensor out = Tensor::empty(Shape{kN, kC, kH, kW}, Device::cpu, "activation", t);
  narrow(nchw.data(), kDims, static_cast<bf16*>(out.raw()));
  return out;
}
std::vector<float> nchw_of(const Tensor& a) {
  if (a.dtype() == DType::f32) return a.to_vector();
  return widen(static_cast<const bf16*>(a.raw()), kDims);
}

struct LayerRun {
  std::vector<float> y_train, dx, y_infer, dgamma, dbeta, running_mean, running_var;
};

// A training forward, its backward, then an inference forward of one batchnorm layer whose
// activations are of dtype t; with a fused relu and/or synchronised statistics.
LayerRun run_layer(DType t, bool fused, bool sync) {
  ModelSpec spec = parse_model_text(
      "name: t\ninput: {channels: 8, height: 3, width: 5}\nlayers:\n  - {name: bn, type: batchnorm}\n", "t.yaml");
  std::unique_ptr<Layer> layer = LayerRegistry::builtin().create(spec.layers[0]);
  layer->infer_shape({Shape{kC, kH, kW}});
  const std::vector<Tensor> params{Tensor::from_vector(Shape{kC}, random_floats(kC, 1, 0.5f, 1.5f)),
                                   Tensor::from_vector(Shape{kC}, random_floats(kC, 2)),
                                   Tensor::from_vector(Shape{kC}, random_floats(kC, 3)),
                                   Tensor::from_vector(Shape{kC}, random_floats(kC, 4, 0.5f, 2.0f))};
  const std::vector<Tensor> grads{Tensor::zeros(Shape{kC}), Tensor::zeros(Shape{kC}), Tensor(), Tensor()};
  layer->bind(params, grads);
  layer->choose_backend(Device::cpu);
  layer->prepare(kN, Device::cpu);
  const ActivationParams relu{ActivationKind::relu, 0.0f};
  OneRank one_rank;
  if (fused) REQUIRE(layer->fuse_activation(&relu));
  if (sync) REQUIRE(layer->set_stats_reducer(&one_rank));

  const ExecContext ctx = ExecContext::cpu(2);
  RunContext rc;
  rc.exec = &ctx;
  const size_t n = size_t(kN * kC * kH * kW);
  std::vector<float> xv = random_floats(n, 5, -1.0f, 3.0f);
  for (size_t i = 0; i < n; ++i) xv[i] += float(i % 3);  // channel means apart from 0
  Tensor x = activation(bf16_exact(xv), t), dy = activation(bf16_exact(random_floats(n, 6)), t);
  Tensor y = activation(std::vector<float>(n), t), dx = activation(std::vector<float>(n), t),
         y_infer = activation(std::vector<float>(n), t);
  rc.training = true;
  layer->forward(rc, {&x}, y);
  layer->backward(rc, {&x}, y, dy, {&dx});
  rc.training = false;
  layer->forward(rc, {&x}, y_infer);
  return {nchw_of(y),           nchw_of(dx),           nchw_of(y_infer),     grads[0].to_vector(),
          grads[1].to_vector(), params[2].to_vector(), params[3].to_vector()};
}

void check_bf16_layer_is_the_rounded_f32_layer(bool fused, bool sync) {
  const LayerRun f32 = run_layer(DType::f32, fused, sync), b16 = run_layer(DType::bf16, fused, sync);
  CHECK(compare(b16.y_train, bf16_exact(f32.y_train), kExact) == "");
  CHECK(compare(b16.dx, bf16_exact(f32.dx), kExact) == "");
  CHECK(compare(b16.y_infer, bf16_exact(f32.y_infer), kExact) == "");
  CHECK(compare(b16.dgamma, f32.dgamma, kExact) == "");
  CHECK(compare(b16.dbeta, f32.dbeta, kExact) == "");
  CHECK(compare(b16.running_mean, f32.running_mean, kExact) == "");
  CHECK(compare(b16.running_var, f32.running_var, kExact) == "");
  // Not vacuous: the batch moved the running statistics and the gradients are not zero.
  CHECK(compare(f32.running_mean, random_floats(kC, 3), kExact) != "");
  CHECK(compare(f32.dgamma, std::vector<float>(kC), kExact) != "");
}

}  // namespace

TEST_CASE("the batchnorm layer runs bf16 channels-last activations as the f32 layer rounded once", "[cpu]") {
  check_bf16_layer_is_the_rounded_f32_layer(false, false);
}
TEST_CASE("the batchnorm layer with a fused relu runs bf16 activations as the f32 layer rounded once", "[cpu]") {
  check_bf16_layer_is_the_rounded_f32_layer(true, false);
}
TEST_CASE("the synchronised batchnorm layer runs bf16 activations as the f32 layer rounded once", "[cpu]") {
  check_bf16_layer_is_the_rounded_f32_layer(false, true);
  check_bf16_layer_is_the_rounded_f32_layer(true, true);
}
