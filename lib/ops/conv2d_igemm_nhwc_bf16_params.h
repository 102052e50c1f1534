// Internal to conv2d_igemm_nhwc_bf16*: the kernels' parameter blocks (passed as __grid_constant__),
// shared by the mma.sync kernels and the sm_90a wgmma ones (conv2d_igemm_nhwc_bf16_wgmma.h).
#pragma once

#include "ops/conv2d_igemm_nhwc_bf16_decode.h"

namespace cnn::igemm_nhwc_bf16_detail {

// Forward and backward data: out (M, N) = gathered A (M, red) * B (N, red)^T.
struct GatherGemmParams {
  NhwcGather g;
  int M, N, red, chunk;  // GEMM view; chunk: reduction per split
  bool vec_out, relu;    // vec_out: N % 8 == 0 and a 16-byte aligned output
};

// Backward filter: dw (K, R*S*C [+1]) = dy^T (K, N*P*Q) * x gathered (N*P*Q, R*S*C [+1]).
struct FilterGemmParams {
  NhwcGather g;               // forward decoder: B(column crs, reduction npq) = x at row npq, tap crs
  Div div_c;                  // column -> (rs, c)
  int M, N, rsc, red, chunk;  // M = K, N = rsc (+ 1 with db), rsc = R*S*C, red = N*P*Q; chunk per split
  int RS, CRS;
  bool db;  // column rsc is the ones column
};

}  // namespace cnn::igemm_nhwc_bf16_detail
