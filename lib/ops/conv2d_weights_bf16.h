// BF16 working copies of a convolution's FP32 master weights (K, C/groups, R, S), cast (round to
// nearest even, core/bf16.h) and permuted in one pass into the layout a BF16 kernel reads:
//   kcrs  (K, C/groups, R, S)  the NCHW kernels (conv2d_igemm_bf16.h, conv2d_direct_bf16.h)
//   krsc  (K, R, S, C)         NHWC implicit GEMM forward (conv2d_igemm_nhwc_bf16.h)
//   crsk  (C, R, S, K)         NHWC implicit GEMM backward data (the same taps, transposed)
//   rsk   (R, S, K)            NHWC direct kernels, C/groups == 1 (conv2d_direct_nhwc_bf16.h)
// F16 copies (fp16 rows) use the same layouts: conv2d_pack_weights_cuda's f16 overload rounds to the
// nearest f16 (core/fp16.h); a master weight past 65504 in magnitude becomes inf there (FP32 master
// weights that large would be a diverged run anyway: the loss scaler sees the inf outputs).
// Trap: crsk needs groups == 1 and rsk needs C/groups == 1 (the pack throws otherwise); the index
// map is written once (conv2d_weights_bf16_index) for the CPU and CUDA versions, so both give the
// same bits.
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/exec_context.h"
#include "core/host_device.h"
#include "ops/conv2d.h"

namespace cnn {

enum class Bf16WeightLayout { kcrs, krsc, crsk, rsk };
const char* to_string(Bf16WeightLayout layout);  // "kcrs" ...

// Whether `layout` exists for sh (crsk: groups == 1; rsk: C/groups == 1). Non-throwing.
bool conv2d_weights_bf16_supports(const Conv2dShape& sh, Bf16WeightLayout layout);

// Element o of the packed copy (o < K*(C/groups)*R*S) comes from element return of the FP32
// master (K, Cg, R, S). Kept as four plain ints so kernels take it by value.
struct WeightsBf16Dims {
  int K, Cg, R, S;
};
CNN_HD int conv2d_weights_bf16_index(Bf16WeightLayout layout, const WeightsBf16Dims& d, int o) {
  const int RS = d.R * d.S;
  switch (layout) {
    case Bf16WeightLayout::krsc: {  // o = (k * RS + rs) * Cg + c
      const int c = o % d.Cg, krs = o / d.Cg, rs = krs % RS, k = krs / RS;
      return (k * d.Cg + c) * RS + rs;
    }
    case Bf16WeightLayout::crsk: {  // o = (c * RS + rs) * K + k
      const int k = o % d.K, crs = o / d.K, rs = crs % RS, c = crs / RS;
      return (k * d.Cg + c) * RS + rs;
    }
    case Bf16WeightLayout::rsk: {  // o = rs * K + k, Cg == 1
      const int k = o % d.K, rs = o / d.K;
      return k * RS + rs;
    }
    case Bf16WeightLayout::kcrs:
      break;
  }
  return o;
}

// w (K, C/groups, R, S) FP32 -> out (layout) BF16 or F16; K*(C/groups)*R*S elements either way.
void conv2d_pack_weights_bf16_cpu(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout,
                                  const float* w, bf16* out);
void conv2d_pack_weights_cuda(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout, const float* w,
                              bf16* out);
void conv2d_pack_weights_cuda(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout, const float* w,
                              f16* out);

}  // namespace cnn
