// Whether this build carries the CUDA kernels of lib/ops (false in a CPU-only build, where
// ops_nocuda.cpp stands in for every *_cuda entry point).
#pragma once

namespace cnn {

bool cuda_ops_built();

}  // namespace cnn
