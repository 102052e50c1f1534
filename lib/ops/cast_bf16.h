// FP32 <-> BF16 conversion of whole buffers (float -> bf16 rounds to nearest even, NaN stays NaN;
// bf16 -> float is exact). The rounding is core/bf16.h's, shared by the CPU and CUDA versions, so
// the CPU emulation of BF16 training and the GPU produce the same bits.
// Trap: the buffers are plain arrays of n elements; the CUDA versions read and write device
// memory and are queued on ctx.cuda_stream.
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "core/fp16.h"
#include "core/exec_context.h"

namespace cnn {

// x (n) -> y (n)
void cast_float_to_bf16_cpu(const ExecContext& ctx, int64_t n, const float* x, bf16* y);
void cast_bf16_to_float_cpu(const ExecContext& ctx, int64_t n, const bf16* x, float* y);

void cast_float_to_bf16_cuda(const ExecContext& ctx, int64_t n, const float* x, bf16* y);
void cast_bf16_to_float_cuda(const ExecContext& ctx, int64_t n, const bf16* x, float* y);
// x (n) -> y (n) in f16 (core/fp16.h's rounding: past 65504 in magnitude becomes inf); the fp16
// rows' weight copies (dense).
void cast_float_to_f16_cuda(const ExecContext& ctx, int64_t n, const float* x, f16* y);

}  // namespace cnn
