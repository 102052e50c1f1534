// Without CUDA, lib/ops has no kernels (the per-op *_nocuda.cpp files stand in for them).
#include "ops/cuda_ops.h"

namespace cnn {

bool cuda_ops_built() { return false; }

}  // namespace cnn
