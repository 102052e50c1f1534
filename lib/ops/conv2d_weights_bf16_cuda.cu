// CUDA packing of BF16 and F16 weight copies (conv2d_weights_bf16.h): one thread per packed element,
// the gather from the FP32 master through the shared index map (weights are small: one pass, no
// tiling); E (bf16 or f16, half16.cuh) is the kernel's template parameter. The batched pack (every
// copy of a training step in one launch) gives each thread a group of kWeightPackGroup consecutive
// elements of one copy (one 8-byte store) and finds the copy by a binary search of the slice's
// table, copied into shared memory by each block: a step's copies cost one launch (one graph node)
// instead of one per op call, and no 256-thread block idles on a 72-element depthwise filter.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

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

// One value of a batched copy, rounded as conv2d_pack_weights_kernel rounds it.
static __device__ __forceinline__ uint16_t pack_one(const WeightPackEntry& e, int o) {
  const float v = __ldg(e.w + conv2d_weights_bf16_index(e.layout, e.d, o));
  return e.f16 ? Half16<f16>::from_float(v) : Half16<bf16>::from_float(v);
}

static __global__ void __launch_bounds__(256)
    conv2d_pack_weights_batch_kernel(const WeightPackEntry* __restrict__ table,  // (count) one slice
                                     int count, int64_t groups) {
  // Raw storage: a __shared__ array of a type with member initialisers must not be constructed.
  __shared__ alignas(WeightPackEntry) unsigned char raw[kWeightPackEntriesPerLaunch * sizeof(WeightPackEntry)];
  WeightPackEntry* slice = reinterpret_cast<WeightPackEntry*>(raw);
  for (int i = int(threadIdx.x); i < count; i += int(blockDim.x)) slice[i] = table[i];
  __syncthreads();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const int64_t o0 = g * kWeightPackGroup;
    const WeightPackEntry& e = slice[weight_pack_find(slice, count, o0)];
    const int base = int(o0 - e.first);
    if (base >= e.n) continue;  // padding after a copy
    uint16_t* out = static_cast<uint16_t*>(e.out) + base;
    if (base + kWeightPackGroup <= e.n) {  // 8-byte aligned: first, base and out are multiples of the group
      static_assert(kWeightPackGroup == 4, "one uint2 store per group");
      const uint32_t lo = uint32_t(pack_one(e, base)) | (uint32_t(pack_one(e, base + 1)) << 16);
      const uint32_t hi = uint32_t(pack_one(e, base + 2)) | (uint32_t(pack_one(e, base + 3)) << 16);
      *reinterpret_cast<uint2*>(out) = make_uint2(lo, hi);
    } else {
      for (int j = 0; base + j < e.n; ++j) out[j] = pack_one(e, base + j);
    }
  }
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

void conv2d_pack_weights_batch_cuda(const ExecContext& ctx, const WeightPackEntry* table, int count,
                                    const std::vector<int64_t>& slice_groups) {
  const char* what = "pack weights batch";
  cudaStream_t stream = cuda::stream_of(ctx, what);
  const size_t slices = (size_t(count) + kWeightPackEntriesPerLaunch - 1) / kWeightPackEntriesPerLaunch;
  CNN_CHECK(slice_groups.size() == slices, "{}: {} slice sizes for {} entries (expected {})", what, slice_groups.size(),
            count, slices);
  for (size_t s = 0; s < slices; ++s) {
    const int n = std::min(kWeightPackEntriesPerLaunch, count - int(s) * kWeightPackEntriesPerLaunch);
    if (slice_groups[s] == 0) continue;
    // At most ~8 blocks an SM, grid-stride beyond: each block reads the slice's table once.
    conv2d_pack_weights_batch_kernel<<<cuda::grid_blocks(slice_groups[s], 256, 1024), 256, 0, stream>>>(
        table + s * kWeightPackEntriesPerLaunch, n, slice_groups[s]);
    CUDA_CHECK_LAUNCH(what);
  }
}

}  // namespace cnn
