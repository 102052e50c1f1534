// Dtype and layout conversion on the GPU (convert.h): one thread per element of y, reading the
// element of x it comes from (writes coalesced; the reads of a permute are strided, which is fine
// at the sizes the graph converts: the model input and flatten's input).
#include "core/cuda_check.h"
#include "ops/convert.h"
#include "ops/reduce.cuh"

namespace cnn {

namespace {

constexpr int kThreads = 256;

__global__ void convert_kernel(ActDims d, const void* __restrict__ x, DType xt, Layout xl,  // d in xl
                               void* __restrict__ y, DType yt, Layout yl) {                // d in yl
  const int64_t total = d.numel();
  const int64_t HW = d.H * d.W;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += stride) {
    int64_t n, c, hw;
    if (yl == Layout::nchw) {
      hw = o % HW;
      c = (o / HW) % d.C;
      n = o / (HW * d.C);
    } else {
      c = o % d.C;
      hw = (o / d.C) % HW;
      n = o / (HW * d.C);
    }
    store_from_float(y, yt, o, load_as_float(x, xt, layout_index(xl, d, n, c, hw)));
  }
}

}  // namespace

void convert_forward_cuda(const ConvertForward& a) {
  check_convert(a);
  const int64_t total = a.d.numel();
  if (total == 0) return;
  cudaStream_t stream = cuda::stream_of(*a.ctx, "convert");
  // Same layout and dtype is a copy; same layout otherwise an element-wise cast: both the same kernel.
  convert_kernel<<<cuda::grid_blocks(total, kThreads), kThreads, 0, stream>>>(
      a.d, a.x.data(), a.x.dtype(), a.x_layout, a.y.data(), a.y.dtype(), a.y_layout);
  CUDA_CHECK_LAUNCH("convert");
}

}  // namespace cnn
