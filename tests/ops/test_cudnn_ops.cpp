// The cuDNN side of lib/ops that needs no GPU: the support queries through the op tables, and
// that can_implement answers "no" instead of throwing where cuDNN cannot run. In a build without
// CUDA there are no cudnn rows at all (the algorithm list is tested in test_cudnn_algos_cuda.cpp).
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/activation.h"
#include "ops/batchnorm.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "ops/pool2d.h"
#include "ops/softmax_cross_entropy.h"
#include "support/catch.h"
#include "support/conv_sweep.h"

using namespace cnn;

TEST_CASE("cudnn can_implement says no on a cpu context instead of throwing", "[cpu]") {
  const ExecContext cpu = ExecContext::cpu(1);
  const Conv2dShape sh = Conv2dShape::make(2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1);
  for (const ConvAlgo& a : test::named_conv_algos(Backend::cudnn)) {
    INFO(a.name << " " << to_string(a.dir));
    CHECK_FALSE(a.can_implement(cpu, sh));
  }
}

TEST_CASE("cudnn support queries follow what cudnn implements with our semantics", "[cpu]") {
  const bool built = backend_built(Backend::cudnn);
  const Backend cudnn = Backend::cudnn;
  const DType f32 = DType::f32;
  CHECK(op_supports(cudnn, f32, Conv2dForward{nullptr, Conv2dShape::make(1, 8, 10, 10, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8)}) ==
        built);
  CHECK(op_supports(cudnn, f32, Pool2dForward{nullptr, Pool2dShape::make(PoolKind::max, 1, 2, 7, 7, 3, 3, 2, 2, 1, 1)}) ==
        built);
  CHECK(op_supports(cudnn, f32, Pool2dBackward{nullptr, Pool2dShape::make(PoolKind::avg, 1, 2, 7, 7, 2, 2, 2, 2)}) ==
        built);
  BatchnormShape bn;
  bn.N = 2, bn.C = 3, bn.H = 4, bn.W = 4;
  CHECK(op_supports(cudnn, f32, BatchnormForwardTrain{nullptr, bn}) == built);
  CHECK(op_supports(cudnn, f32, SoftmaxCrossEntropyForward{nullptr, SoftmaxCrossEntropyShape{4, 7, 0.1f}}) == built);
  auto activation = [&](ActivationKind kind, float alpha) {
    return op_supports(cudnn, f32, ActivationForward{nullptr, {kind, alpha}, 16}) &&
           op_supports(cudnn, f32, ActivationBackward{nullptr, {kind, alpha}, 16});
  };
  CHECK(activation(ActivationKind::relu, 0.0f) == built);
  CHECK(activation(ActivationKind::elu, 1.0f) == built);
  // cuDNN has no leaky relu; its elu derivative drops alpha (measured dy e^x for our dy alpha e^x
  // on an H200, cuDNN 9.14), so only alpha = 1 is claimed.
  CHECK_FALSE(activation(ActivationKind::leaky_relu, 0.01f));
  CHECK_FALSE(activation(ActivationKind::elu, 0.3f));
  CHECK_FALSE(activation(ActivationKind::elu, 2.0f));
  CHECK_FALSE(activation(ActivationKind::elu, -0.5f));
  // No cudnn row for the phased batchnorm ops, and none of another dtype.
  CHECK_FALSE(op_supports(cudnn, f32, BatchnormForwardStats{nullptr, bn}));
  CHECK_FALSE(op_supports(cudnn, DType::bf16, BatchnormForwardTrain{nullptr, bn}));
  // Sizes beyond cuDNN's int API.
  Conv2dShape huge = Conv2dShape::make(1, 1, 4, 4, 1, 3, 3);
  huge.N = int64_t{1} << 32;
  CHECK_FALSE(op_supports(cudnn, f32, Conv2dForward{nullptr, huge}));
}
