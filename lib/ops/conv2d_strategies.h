// More CUDA convolution strategies beside conv2d_cuda's implicit GEMM and direct (Li et al.,
// ICPP 2016: no implementation wins everywhere), for the registry, the autotuner and cnn-bench:
//   winograd     F(2x2, 3x3) (Lavin & Gray 2016): 3x3, stride 1, dilation 1, groups 1; forward any
//                padding, backward_data pad <= 2 (the rotated filter with padding 2 - pad),
//                backward_filter any padding                        conv2d_winograd_cuda.cu
//   im2col_gemm  Caffe's im2col + cuBLAS SGEMM per group, any shape   conv2d_im2col_cuda.cu
//   fft          stride 1, dilation 1, groups 1, all directions: our own transforms on power-of-two
//                squares up to 64 (conv2d_fft_transforms.h), else cuFFT's  conv2d_fft_cuda.cu
// Operands (f32) and contract as in conv2d_algo.h (outputs written, not accumulated; device memory;
// work on ctx.cuda_stream; scratch from ctx.workspace, at most workspace_bytes(sh, dir) bytes).
// After a shape's first call (which may make cuFFT plans, cached per context), a call neither
// allocates nor synchronises, so training steps using them can be captured into CUDA graphs.
// Trap: the strategies exist in CUDA builds only (their rows are in conv2d_algo_cuda.cpp); the shape
// rules themselves (*_shape_supported, conv2d_strategies.cpp) hold in every build.
#pragma once

#include <cstddef>

#include "ops/conv2d.h"
#include "ops/conv2d_algo.h"

namespace cnn {

bool conv2d_cuda_winograd_can_implement(const Conv2dShape& sh, ConvDir dir);
size_t conv2d_cuda_winograd_workspace_bytes(const Conv2dShape& sh, ConvDir dir);
void conv2d_cuda_winograd_run(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const ConvOperandsF32& op);

bool conv2d_cuda_im2col_gemm_can_implement(const Conv2dShape& sh, ConvDir dir);
size_t conv2d_cuda_im2col_gemm_workspace_bytes(const Conv2dShape& sh, ConvDir dir);
void conv2d_cuda_im2col_gemm_run(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const ConvOperandsF32& op);

bool conv2d_cuda_fft_can_implement(const Conv2dShape& sh, ConvDir dir);
size_t conv2d_cuda_fft_workspace_bytes(const Conv2dShape& sh, ConvDir dir);
void conv2d_cuda_fft_run(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const ConvOperandsF32& op);
// Device bytes the context's cuFFT plans hold as work areas of their own, outside ctx.workspace: 0
// unless cuFFT wanted more than the reserve workspace_bytes counts (tests check it stays 0).
size_t conv2d_cuda_fft_work_bytes_outside_workspace(const ExecContext& ctx);
// The FFT strategy's complex transpose, queued on `stream` (a cudaStream_t): out (cols, rows) =
// in (rows, cols), float2 elements. Exported for tools/fft_layout_bench.cu, which times it.
void conv2d_cuda_fft_transpose(void* stream, const float* in, float* out, int64_t rows, int64_t cols);

// The shape rules behind can_implement, host logic compiled in every build (conv2d_strategies.cpp),
// so CPU-only CI tests them; in a CUDA build can_implement(sh, dir) == shape_supported(sh, dir).
bool conv2d_winograd_shape_supported(const Conv2dShape& sh, ConvDir dir);
bool conv2d_im2col_gemm_shape_supported(const Conv2dShape& sh, ConvDir dir);
bool conv2d_fft_shape_supported(const Conv2dShape& sh, ConvDir dir);

}  // namespace cnn
