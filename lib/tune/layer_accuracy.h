// How far a layer's cuDNN implementation is from our own: the accuracy guard of every cuDNN
// choice that is not a convolution (batchnorm, pooling, activations). The layer runs a training
// forward and a backward on probe operands on the candidate backend and on the reference backend
// (our CUDA kernels, themselves tested against the CPU); every output is compared (y, each dx,
// each parameter gradient, each buffer the forward updates, e.g. running statistics) as a
// relative L2 difference, and the worst over the outputs and the operand sets counts.
// Operand sets (as in conv_accuracy.h, the worse of the two counts):
//  0: x ~ N(0,1), dy ~ N(0,1);
//  1: x ~ N(0,1) + an offset of 0, 4 or 8 by channel (c mod 3): a batchnorm whose channels have a
//     large mean next to their spread, where a variance taken as E[x^2] - E[x]^2 loses digits;
//     dy ~ 2^-17 N(0,1), the size of real gradients a few layers below the loss.
// Parameters: 1 + 0.1 N(0,1) where the layer initialises them to ones (gamma, running_var), else
// 0.1 N(0,1); the same values on both backends. Each set's x and dy are made once on ctx's device
// (probe_operands.h) and read by both backends; parameters are uploaded afresh for each run (the
// forward updates buffers); outputs are compared where they live (on a GPU only sums come back).
// Trap: the probe binds its own tensors to the layer (Layer::bind, prepare) and leaves the layer
// on its original backend; whoever runs the layer afterwards binds again (the Executor does when
// it is built, after the autotuner). Inputs are continuous, so max pooling meets no ties.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/exec_context.h"
#include "graph/graph.h"

namespace cnn {

struct LayerAccuracy {
  double rel_err = 0;  // the worst relative L2 difference (NaN when an output was NaN)
  std::string worst;   // the output it was measured on: "y", "dx", "grad weight", "running_var", ...
};

// The error of node `index`'s layer on `candidate` against `reference`, at `batch`, on ctx's
// device; nullopt when the layer does not support `reference` for its shapes.
std::optional<LayerAccuracy> layer_backend_error(Graph& graph, int index, const ExecContext& ctx, int64_t batch,
                                                 Backend candidate, Backend reference);

}  // namespace cnn
