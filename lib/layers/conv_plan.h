// The per-direction convolution plan of a conv2d layer: which ConvAlgo (conv2d_algo.h) runs its
// forward, backward_data and backward_filter. The layer reads the requests from its `algo:` key;
// the autotuner (tune/autotune.h) resolves them for the run's device and batch.
// Trap: a direction left unresolved (no autotuner ran: a CPU run, a test that builds an Executor
// directly) runs the backend's default dispatch of conv2d.h, which is what it did before plans.
#pragma once

#include <array>
#include <string>

#include "layers/layer.h"
#include "ops/conv2d_algo.h"

namespace cnn {

constexpr std::array<ConvDir, 3> kConvDirs{ConvDir::forward, ConvDir::backward_data, ConvDir::backward_filter};

struct ConvPlan {
  std::array<std::string, 3> requested{"auto", "auto", "auto"};  // "auto" or an algorithm name
  std::array<const ConvAlgo*, 3> chosen{};                       // null: not resolved yet
  std::array<std::string, 3> notes;  // how each choice was made ("autotuned: 0.12 ms, 1.31x over ...")
  std::string& note(ConvDir d) { return notes[size_t(d)]; }
  const std::string& request(ConvDir d) const { return requested[size_t(d)]; }
  const ConvAlgo*& algo(ConvDir d) { return chosen[size_t(d)]; }
  const ConvAlgo* algo(ConvDir d) const { return chosen[size_t(d)]; }
};

// Implemented by the conv2d layer; the autotuner finds it through Layer::conv_planned().
class ConvPlanned {
public:
  virtual ~ConvPlanned() = default;
  virtual ConvPlan& conv_plan() = 0;
  virtual const ConvPlan& conv_plan() const = 0;
  virtual Conv2dShape conv_shape(int64_t batch) const = 0;  // valid after infer_shape
  // The shape direction d runs: conv_shape(batch), without the bias in forward while the bias is
  // folded into the following batchnorm (Layer::fold_bias; backward_filter still writes db).
  virtual Conv2dShape conv_shape(int64_t batch, ConvDir d) const = 0;
};

}  // namespace cnn
