// Internal to the direct BF16 convolutions on the GPU (conv2d_direct_bf16_cuda.cu, which defines
// it, and conv2d_direct_nhwc_bf16_cuda.cu): the last pass of their filter gradients.
#pragma once

#include <cuda_runtime.h>

namespace cnn {

// dw[k, tap] and db[k] (either may be null) = the sum over slices, in a fixed order, of parts
// (slices, K, taps), where tap taps - 1 is the bias; launched on stream, `what` names the caller.
void conv2d_direct_bf16_sum_slices_cuda(cudaStream_t stream, const float* parts, int slices, int K, int taps,
                                        float* dw, float* db, const char* what);

}  // namespace cnn
