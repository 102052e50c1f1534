// CUDA packing of BF16 and F16 weight copies (conv2d_weights_bf16.h): one thread per packed element,
// the gather from the FP32 master through the shared index map (weights are small: one pass, no
// tiling); E (bf16 or f16, half16.cuh) is the kernel's template parameter.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d_weights_bf16.h"
#include "ops/half16.cuh"
#include "ops/reduce.cuh"

namespace cnn {

template <class E>
static __global__ void conv2d_pack_weights_kernel(Bf16WeightLayout layout, WeightsBf16Dims d, int n,
                                                  const float* __restrict__ w,   // (K, Cg, R, S)
                                                  uint16_t* __restrict__ out) {  // (layout)
  for (int o = int(blockIdx.x * blockDim.x + threadIdx.x); o < n; o += int(gridDim.x * blockDim.x))
    out[o] = Half16<E>::from_float(__ldg(w + conv2d_weights_bf16_index(layout, d, o)));
}

template <class E>
static void pack(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout, const float* w, E* out,
                 const char* what) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  CNN_CHECK(conv2d_weights_bf16_supports(sh, layout), "{}: layout {} does not exist for {}", what, to_string(layout),
            sh.to_string());
  const int n = int(sh.weight_numel());
  const WeightsBf16Dims d{int(sh.K), int(sh.C / sh.groups), int(sh.R), int(sh.S)};
  conv2d_pack_weights_kernel<E><<<cuda::grid_blocks(n, 256), 256, 0, stream>>>(layout, d, n, w,
                                                                               reinterpret_cast<uint16_t*>(out));
  CUDA_CHECK_LAUNCH(what);
}

void conv2d_pack_weights_cuda(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout, const float* w,
                              bf16* out) {
  pack(ctx, sh, layout, w, out, "pack weights bf16");
}
void conv2d_pack_weights_cuda(const ExecContext& ctx, const Conv2dShape& sh, Bf16WeightLayout layout, const float* w,
                              f16* out) {
  pack(ctx, sh, layout, w, out, "pack weights f16");
}

}  // namespace cnn
