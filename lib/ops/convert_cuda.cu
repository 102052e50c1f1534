// Dtype and layout conversion on the GPU (convert.h): one thread per element of y, reading the
// element of x it comes from (writes coalesced; the reads of a permute are strided, which is fine
// at the sizes the graph converts: the model input and flatten's input).
#include "core/cuda_check.h"
#include "ops/convert.h"
#include "ops/reduce.cuh"

namespace cnn {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load_el(const void* p, bool bf, int64_t i) {
  return bf ? float_from_bf16_bits(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void store_el(void* p, bool bf, int64_t i, float v) {
  if (bf) static_cast<uint16_t*>(p)[i] = bf16_bits_from_float(v);
  else static_cast<float*>(p)[i] = v;
}

__global__ void convert_kernel(ActDims d, const void* __restrict__ x, bool x_bf16, Layout xl,  // d in xl
                               void* __restrict__ y, bool y_bf16, Layout yl) {                // d in yl
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
    store_el(y, y_bf16, o, load_el(x, x_bf16, layout_index(xl, d, n, c, hw)));
  }
}

}  // namespace

void convert_forward_cuda(const ConvertForward& a) {
  for (DType t : {a.x.dtype(), a.y.dtype()})
    CNN_CHECK(t == DType::f32 || t == DType::bf16, "convert: dtype {} is neither f32 nor bf16", to_string(t));
  CNN_CHECK(a.x_layout == a.y_layout || a.x.data() != a.y.data() || a.d.numel() == 0,
            "convert: a permute ({} -> {}) cannot run in place", to_string(a.x_layout), to_string(a.y_layout));
  const int64_t total = a.d.numel();
  if (total == 0) return;
  cudaStream_t stream = cuda::stream_of(*a.ctx, "convert");
  // Same layout and dtype is a copy; same layout otherwise an element-wise cast: both the same kernel.
  convert_kernel<<<cuda::grid_blocks(total, kThreads), kThreads, 0, stream>>>(
      a.d, a.x.data(), a.x.dtype() == DType::bf16, a.x_layout, a.y.data(), a.y.dtype() == DType::bf16, a.y_layout);
  CUDA_CHECK_LAUNCH("convert");
}

}  // namespace cnn
