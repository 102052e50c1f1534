// CUDA builds carry the cuDNN backend of lib/ops (the *_cudnn.cpp files).
#include "ops/cudnn_ops.h"

namespace cnn {

bool cudnn_ops_built() { return true; }

}  // namespace cnn
