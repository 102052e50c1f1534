// CUDA kernels of conv2d_cudnn_bf16.h (E, bf16 or f16, their template parameter): the bias
// broadcast (8 channels a 16-byte store where K % 8 == 0 and y is aligned, one at a time otherwise)
// and the KRSC 16-bit -> KCRS FP32 filter gradient through the weight packing's index map
// (conv2d_weights_bf16.h), so the two layouts agree.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d_cudnn_bf16.h"
#include "ops/conv2d_weights_bf16.h"
#include "ops/half16.cuh"
#include "ops/reduce.cuh"

namespace cnn {

static constexpr int kThreads = 256;

// y[i] = E(b[i % K]); kVec: 8 elements (one channel run of a pixel, K % 8 == 0) a store.
template <class E, bool kVec>
static __global__ void __launch_bounds__(kThreads)
    conv2d_cudnn_fill_bias_kernel(int64_t count, int64_t K,
                                  const float* __restrict__ b,  // (K)
                                  uint16_t* __restrict__ y) {   // (pixels, K) E bits
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if constexpr (kVec) {
    for (int64_t i8 = first; i8 < count / 8; i8 += stride) {
      const float* bk = b + (i8 * 8) % K;
      reinterpret_cast<uint4*>(y)[i8] = make_uint4(Half16<E>::pack2(__ldg(bk), __ldg(bk + 1)),
                                                   Half16<E>::pack2(__ldg(bk + 2), __ldg(bk + 3)),
                                                   Half16<E>::pack2(__ldg(bk + 4), __ldg(bk + 5)),
                                                   Half16<E>::pack2(__ldg(bk + 6), __ldg(bk + 7)));
    }
  } else {
    for (int64_t i = first; i < count; i += stride) y[i] = Half16<E>::from_float(__ldg(b + i % K));
  }
}

// dw[index(o)] = dw16[o] for every element o of the KRSC copy.
template <class E>
static __global__ void __launch_bounds__(kThreads)
    conv2d_cudnn_unpack_dw_kernel(WeightsBf16Dims d, int n,
                                  const uint16_t* __restrict__ dw16,  // (K, R, S, C/groups) E bits
                                  float* __restrict__ dw) {           // (K, C/groups, R, S)
  for (int o = int(blockIdx.x) * kThreads + int(threadIdx.x); o < n; o += int(gridDim.x) * kThreads)
    dw[conv2d_weights_bf16_index(Bf16WeightLayout::krsc, d, o)] = Half16<E>::to_float(__ldg(dw16 + o));
}

template <class E>
static void fill_bias(const ExecContext& ctx, int64_t pixels, int64_t K, const float* b, E* y, const char* what) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  CNN_CHECK(pixels >= 0 && K >= 1, "{}: expected pixels >= 0 and K >= 1, got {} and {}", what, pixels, K);
  const int64_t count = pixels * K;
  if (count == 0) return;
  auto* bits = reinterpret_cast<uint16_t*>(y);
  if (K % 8 == 0 && cuda::aligned16(y))
    conv2d_cudnn_fill_bias_kernel<E, true><<<cuda::grid_blocks(count / 8, kThreads), kThreads, 0, stream>>>(
        count, K, b, bits);
  else
    conv2d_cudnn_fill_bias_kernel<E, false><<<cuda::grid_blocks(count, kThreads), kThreads, 0, stream>>>(count, K, b,
                                                                                                         bits);
  CUDA_CHECK_LAUNCH(what);
}

template <class E>
static void unpack_dw(const ExecContext& ctx, const Conv2dShape& sh, const E* dw16, float* dw, const char* what) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  CNN_CHECK(conv2d_weights_bf16_supports(sh, Bf16WeightLayout::krsc), "{}: no krsc layout for {}", what,
            sh.to_string());
  const int n = int(sh.weight_numel());
  const WeightsBf16Dims d{int(sh.K), int(sh.C / sh.groups), int(sh.R), int(sh.S)};
  conv2d_cudnn_unpack_dw_kernel<E><<<cuda::grid_blocks(n, kThreads), kThreads, 0, stream>>>(
      d, n, reinterpret_cast<const uint16_t*>(dw16), dw);
  CUDA_CHECK_LAUNCH(what);
}

void conv2d_cudnn_fill_bias_cuda(const ExecContext& ctx, int64_t pixels, int64_t K, const float* b, bf16* y) {
  fill_bias(ctx, pixels, K, b, y, "conv2d cudnn bf16 bias fill");
}
void conv2d_cudnn_fill_bias_cuda(const ExecContext& ctx, int64_t pixels, int64_t K, const float* b, f16* y) {
  fill_bias(ctx, pixels, K, b, y, "conv2d cudnn f16 bias fill");
}
void conv2d_cudnn_unpack_dw_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* dw16, float* dw) {
  unpack_dw(ctx, sh, dw16, dw, "conv2d cudnn bf16 unpack dw");
}
void conv2d_cudnn_unpack_dw_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* dw16, float* dw) {
  unpack_dw(ctx, sh, dw16, dw, "conv2d cudnn f16 unpack dw");
}

}  // namespace cnn
