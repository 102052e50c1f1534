// Internal to conv2d_igemm_nhwc_bf16*: the sm_90a (Hopper) wgmma kernels of the NHWC BF16/F16 implicit
// GEMM, tiles kIgemmNhwcBf16WgmmaFirst.. of conv2d_igemm_nhwc_bf16.h. They are compiled only where
// the build targets sm_90 (conv2d_igemm_nhwc_bf16_wgmma_sm90a.cu, machine code for sm_90a alone);
// elsewhere conv2d_igemm_nhwc_bf16_wgmma_nosm90a.cpp stands in and reports them missing.
// Trap: callers ask igemm_nhwc_bf16_wgmma_usable() first: the kernels run on compute capability
// 9.0 only, and the launchers throw anywhere else.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "ops/conv2d_igemm_nhwc_bf16_params.h"

namespace cnn::igemm_nhwc_bf16_detail {

// Whether the wgmma kernels are built in and the current device runs them (compute capability 9.0).
bool igemm_nhwc_bf16_wgmma_usable();

// The kernel of wgmma tile `tile` (kIgemmNhwcBf16WgmmaFirst..), `splits` slices; partials as the
// mma.sync kernels write them. data: backward data (dy gathered), else forward. dtype: of the
// 16-bit operands, bf16 or f16 (wgmma's .bf16 or .f16 inputs).
void igemm_nhwc_bf16_wgmma_gather(DType dtype, cudaStream_t stream, int tile, bool data, int splits,
                                  const GatherGemmParams& p, const uint16_t* a_src, const uint16_t* b_src,
                                  const float* bias, uint16_t* out, float* parts);
void igemm_nhwc_bf16_wgmma_filter(DType dtype, cudaStream_t stream, int tile, int splits, const FilterGemmParams& p,
                                  const uint16_t* x, const uint16_t* dy, float* dw, float* db, float* parts);

}  // namespace cnn::igemm_nhwc_bf16_detail
