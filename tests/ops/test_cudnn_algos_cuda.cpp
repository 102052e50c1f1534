// The named cuDNN convolution algorithms of a CUDA build, which needs no GPU: every algorithm of
// every direction by name, cuDNN's documented non-deterministic ones marked, and winograd_nonfused
// refused by our accuracy rule (conv2d_cudnn_algo_accurate, a function of the shape alone).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"
#include "support/catch.h"
#include "support/conv_sweep.h"

using namespace cnn;

TEST_CASE("cudnn conv2d algorithms are listed by direction with their determinism and accuracy rule", "[cpu]") {
  const std::vector<ConvAlgo> algos = test::named_conv_algos(Backend::cudnn);
  REQUIRE(algos.size() == 20);
  const auto accurate = [](ConvDir d, const std::string& name, const Conv2dShape& sh) {
    return conv2d_cudnn_algo_accurate(d, name, sh);
  };
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
    for (const Conv2dShape& sh : small) CHECK(accurate(a.dir, a.name, sh) == !nonfused);
    for (const Conv2dShape& sh : large) CHECK(accurate(a.dir, a.name, sh) == !nonfused);
  }
  CHECK_THROWS_AS(accurate(ConvDir::forward, "cudnn:algo_0", small[0]), Error);
}

