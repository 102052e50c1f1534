// Whether this build carries the cuDNN backend of lib/ops (the *_cudnn.cpp files and lib/cudnn);
// false in a CPU-only build, where cudnn_ops_nocuda.cpp stands in for every *_cudnn entry point.
#pragma once

namespace cnn {

bool cudnn_ops_built();

}  // namespace cnn
