// The cuDNN side of lib/ops that needs no GPU: the algorithm list (every algorithm of every
// direction by name, cuDNN's documented non-deterministic ones marked, winograd_nonfused refused on
// filters larger than 3x3), the support queries, and
// that can_implement answers "no" instead of throwing where cuDNN cannot run.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/activation.h"
#include "ops/batchnorm.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "ops/cudnn_ops.h"
#include "ops/pool2d.h"
#include "support/catch.h"

using namespace cnn;

TEST_CASE("cudnn conv2d algorithms are listed by direction with their determinism and accuracy rule", "[cpu]") {
  const std::vector<ConvAlgo> algos = conv2d_cudnn_algos();
  if (!cudnn_ops_built()) {
    CHECK(algos.empty());
    return;
  }
  std::map<ConvDir, std::set<std::string>> names, nondeterministic;
  for (const ConvAlgo& a : algos) {
    CHECK(a.backend == Backend::cudnn);
    CHECK(names[a.dir].insert(a.name).second);  // unique per direction
    if (!a.deterministic) nondeterministic[a.dir].insert(a.name);
  }
  CHECK(names[ConvDir::forward] == std::set<std::string>{"cudnn:implicit_gemm", "cudnn:implicit_precomp_gemm",
                                                         "cudnn:gemm", "cudnn:direct", "cudnn:fft", "cudnn:fft_tiling",
                                                         "cudnn:winograd", "cudnn:winograd_nonfused"});
  CHECK(names[ConvDir::backward_data] == std::set<std::string>{"cudnn:algo_0", "cudnn:algo_1", "cudnn:fft",
                                                               "cudnn:fft_tiling", "cudnn:winograd",
                                                               "cudnn:winograd_nonfused"});
  CHECK(names[ConvDir::backward_filter] == std::set<std::string>{"cudnn:algo_0", "cudnn:algo_1", "cudnn:fft",
                                                                 "cudnn:algo_3", "cudnn:winograd_nonfused",
                                                                 "cudnn:fft_tiling"});
  CHECK(nondeterministic[ConvDir::forward].empty());
  CHECK(nondeterministic[ConvDir::backward_data] == std::set<std::string>{"cudnn:algo_0"});
  CHECK(nondeterministic[ConvDir::backward_filter] == std::set<std::string>{"cudnn:algo_0", "cudnn:algo_3"});
  // Measured on an H200 (cuDNN 9.14): winograd_nonfused is 0.5%-7% off on 5x5 filters in every
  // direction, and on 3x3 filters it left a fer_cnn step's gradients 2.5e-3-5.6e-3 from float64
  // (PyTorch 5e-6-6e-4), so it is refused on every shape, and it alone.
  const Conv2dShape small[] = {Conv2dShape::make(2, 8, 12, 12, 16, 3, 3, 1, 1, 1, 1),
                               Conv2dShape::make(2, 16, 7, 7, 8, 1, 1),
                               Conv2dShape::make(2, 3, 8, 11, 6, 2, 3, 1, 1, 1, 1)};
  const Conv2dShape large[] = {Conv2dShape::make(3, 6, 10, 9, 4, 5, 5, 1, 1, 2, 2),
                               Conv2dShape::make(4, 1, 20, 20, 8, 5, 5), Conv2dShape::make(1, 2, 9, 9, 2, 3, 5),
                               Conv2dShape::make(1, 2, 9, 9, 2, 4, 3), Conv2dShape::make(1, 2, 9, 9, 2, 7, 7)};
  for (const ConvAlgo& a : algos) {
    INFO(a.name << " " << to_string(a.dir));
    const bool nonfused = a.name == "cudnn:winograd_nonfused";
    for (const Conv2dShape& sh : small) CHECK(conv2d_cudnn_algo_accurate(a.dir, a.name, sh) == !nonfused);
    for (const Conv2dShape& sh : large) CHECK(conv2d_cudnn_algo_accurate(a.dir, a.name, sh) == !nonfused);
  }
  CHECK_THROWS_AS(conv2d_cudnn_algo_accurate(ConvDir::forward, "cudnn:algo_0", small[0]), Error);
}

TEST_CASE("cudnn can_implement says no on a cpu context instead of throwing", "[cpu]") {
  const ExecContext cpu = ExecContext::cpu(1);
  const Conv2dShape sh = Conv2dShape::make(2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1);
  for (const ConvAlgo& a : conv2d_cudnn_algos()) {
    INFO(a.name << " " << to_string(a.dir));
    CHECK_FALSE(a.can_implement(cpu, sh));
  }
}

TEST_CASE("cudnn support queries follow what cudnn implements with our semantics", "[cpu]") {
  const bool built = cudnn_ops_built();
  CHECK(conv2d_cudnn_supports(Conv2dShape::make(1, 8, 10, 10, 8, 3, 3, 1, 1, 1, 1, 1, 1, 8)) == built);
  CHECK(pool2d_cudnn_supports(Pool2dShape::make(PoolKind::max, 1, 2, 7, 7, 3, 3, 2, 2, 1, 1)) == built);
  CHECK(pool2d_cudnn_supports(Pool2dShape::make(PoolKind::avg, 1, 2, 7, 7, 2, 2, 2, 2)) == built);
  BatchnormShape bn;
  bn.N = 2, bn.C = 3, bn.H = 4, bn.W = 4;
  CHECK(batchnorm_cudnn_supports(bn) == built);
  CHECK(activation_cudnn_supports({ActivationKind::relu, 0.0f}) == built);
  CHECK(activation_cudnn_supports({ActivationKind::elu, 1.0f}) == built);
  // cuDNN has no leaky relu; its elu derivative drops alpha (measured dy e^x for our dy alpha e^x
  // on an H200, cuDNN 9.14), so only alpha = 1 is claimed.
  CHECK_FALSE(activation_cudnn_supports({ActivationKind::leaky_relu, 0.01f}));
  CHECK_FALSE(activation_cudnn_supports({ActivationKind::elu, 0.3f}));
  CHECK_FALSE(activation_cudnn_supports({ActivationKind::elu, 2.0f}));
  CHECK_FALSE(activation_cudnn_supports({ActivationKind::elu, -0.5f}));
  // Sizes beyond cuDNN's int API.
  Conv2dShape huge = Conv2dShape::make(1, 1, 4, 4, 1, 3, 3);
  huge.N = int64_t{1} << 32;
  CHECK_FALSE(conv2d_cudnn_supports(huge));
}
