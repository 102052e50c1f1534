// Stand-in for conv2d_algo_cuda.cpp in a build without CUDA: no CUDA convolution algorithms.
#include "ops/conv2d_algo.h"

namespace cnn {

std::vector<ConvAlgo> conv2d_cuda_algos() { return {}; }

}  // namespace cnn
