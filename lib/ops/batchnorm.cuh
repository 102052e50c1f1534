// Device helpers shared by the batchnorm kernels (batchnorm_cuda.cu, batchnorm_phased_cuda.cu): the
// per-channel view of an NCHW tensor and the fixed slicing that keeps the sums bitwise repeatable.
// Trap: slices_for depends on the shape only; sizing slices by occupancy would change the sums.
#pragma once

#include <algorithm>

#include "ops/batchnorm.h"
#include "ops/reduce.cuh"

namespace cnn {

static constexpr int kThreads = 256;

// Channel c's values as a flat range [0, M), M = N*HW: value j sits at (j / HW * C + c) * HW + j % HW.
struct ChannelLayout {
  int64_t C;
  int HW;
  int M;  // N * HW
  cuda::FastDiv32 by_HW;
  __device__ __forceinline__ int64_t at(int c, int j) const {
    const int n = by_HW.div(j);
    return (static_cast<int64_t>(n) * C + c) * HW + (j - n * HW);
  }
};

// The channel of flat element (or float4 group) i: (i / group) % C, group = HW (or HW / 4).
template <typename Div>
__device__ __forceinline__ int channel_of(typename Div::Index i, int C, const Div& by_group, const Div& by_C) {
  const typename Div::Index plane = by_group.div(i);
  return static_cast<int>(plane - by_C.div(plane) * C);
}

// Slice b of gridDim.x slices of [0, M): the same split for every channel.
__device__ __forceinline__ void slice_of(int M, int& begin, int& end) {
  const int per = (M + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
  begin = min(M, static_cast<int>(blockIdx.x) * per);
  end = min(M, begin + per);
}

// Slices per channel: at least ~2048 values each, and enough blocks over all channels to fill a
// large GPU. A function of the shape only, so the partial sums (and the result) are reproducible.
inline int slices_for(const BatchnormShape& sh) {
  const int64_t M = sh.N * sh.H * sh.W;
  const int64_t by_size = (M + 2047) / 2048;
  const int64_t by_fill = (1024 + sh.C - 1) / sh.C;
  return static_cast<int>(std::max<int64_t>(1, std::min(by_size, by_fill)));
}

inline ChannelLayout layout_of(const BatchnormShape& sh) {
  return ChannelLayout{sh.C, static_cast<int>(sh.H * sh.W), static_cast<int>(sh.N * sh.H * sh.W),
                       cuda::FastDiv32(sh.H * sh.W)};
}

}  // namespace cnn
