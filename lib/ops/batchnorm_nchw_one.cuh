// One kernel a direction for the f32 NCHW batchnorm rows (batchnorm_cuda.cu, batchnorm_phased_cuda.cu).
// The two-kernel path (batchnorm.cuh) is a sums pass then an elementwise pass; at mini_xception's
// sizes at batch 32 each is a few microseconds of work behind a launch, so a training step's 23
// batchnorm directions cost about as much in launches and drains as in bytes. The one-kernel path
// is one cooperative grid of the same (slices, C) blocks: each block adds its slice's sums with
// the sums pass's own loop and block sum and stores them as its slice's partials, waits at a
// grid-wide barrier, then adds every slice's partials of its channel in slice order (sum_slices,
// as the channel's last block does on the two-kernel path), so every block derives the same
// coefficients; the block of slice 0 writes the per-channel outputs (running and saved statistics,
// dgamma, dbeta, the phased ops' sums). Then it runs the elementwise pass's loop over its slice.
// Same slices, same sums in the same order, same per-channel arithmetic: the results are the
// two-kernel path's bit for bit (tests/ops/test_batchnorm_cuda.cpp holds it to that).
// Which path runs: NhwcPath (batchnorm_nhwc_bf16.cuh) serves both layouts. The default rows take
// one kernel where the grid has at most kOneKernelNchwBlocks blocks, the tensor at most
// kOneKernelNchwValues values and the device holds the grid at once (cooperative_grid_fits), else
// two; CNN_BATCHNORM_KERNELS=two and the named rows ("cuda:one_kernel", "cuda:two_kernels") force a
// path.
// Trap: the shift a forward subtracts (running_mean on the phased rows) is read before the barrier
// (stat.before): the owner block updates running_mean after it.
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "ops/batchnorm.cuh"
#include "ops/batchnorm_nhwc_bf16.cuh"

namespace cnn {

// Most values (N C H W) the default rows run in one kernel. Larger tensors are bound by bytes,
// not launches, and keep the two-kernel path that was measured on them.
constexpr int64_t kOneKernelNchwValues = int64_t{1} << 21;

// Most blocks of a one-kernel grid: 4 of kThreads a multiprocessor on a GPU of 128, which any
// GPU of that size holds at once (the kernel needs no more registers or shared memory than that
// allows); the H200 holds 792 of the forward.
constexpr int64_t kOneKernelNchwBlocks = 512;

// Whether the one-kernel path takes the shape (the rows' supports; a function of the shape only,
// the device's capacity is checked again at launch).
inline bool nchw_one_kernel_fits(const BatchnormShape& sh) {
  return sh.N > 0 && sh.C > 0 && sh.C <= 65535 && sh.H > 0 && sh.W > 0 && cuda::fits_int32(sh.N * sh.H * sh.W) &&
         int64_t{slices_for(sh)} * sh.C <= kOneKernelNchwBlocks;
}

// The coefficients a stat hands to the elementwise pass, through shared memory.
template <typename Stat>
__device__ __forceinline__ void one_kernel_channel_coefs(const Stat& stat, const double* __restrict__ partial, int c,
                                                         float before, float* coef) {
  if (threadIdx.x == 0) {
    double s, t;
    sum_slices(partial, c, static_cast<int>(gridDim.x), s, t);
    float cf[Stat::kCoefs];
    stat(c, s, t, before, blockIdx.x == 0, cf);
#pragma unroll
    for (int j = 0; j < Stat::kCoefs; ++j) coef[j] = cf[j];
  }
  __syncthreads();
}

// grid (slices, C), cooperative: the forward. shift: the sums' shift (ChannelShift); stat: before(c)
// the shift as a float, stat(c, s, ss, before, owner, cf) with cf = (mean, scale, beta, ...). L is
// the value layout of the sums, G the elementwise pass's (G = group_layout_of when kVec).
template <bool kVec, typename Epi, typename Shift, typename Stat>
static __global__ void __launch_bounds__(kThreads)
    batchnorm_forward_one_kernel_nchw(ChannelLayout L, ChannelLayout G, Epi epi, Shift shift, Stat stat,
                                      const float* __restrict__ x, float* __restrict__ y,
                                      double* __restrict__ partial) {
  __shared__ double shared[kThreads / cuda::kWarpSize];
  __shared__ float coef[Stat::kCoefs];
  const int c = blockIdx.y;
  const float before = threadIdx.x == 0 ? stat.before(c) : 0.0f;
  double s, ss;
  forward_slice_sums(L, x, shift, c, s, ss);
  store_slice_sums(partial, c, s, ss, shared);
  cooperative_groups::this_grid().sync();  // fences: every slice's partials are visible
  one_kernel_channel_coefs(stat, partial, c, before, coef);
  normalize_slice<kVec>(G, epi, c, coef[0], coef[1], coef[2], x, y);
}

// grid (slices, C), cooperative: the backward. stat(c, s, sx, 0, owner, cf) with cf = (a, b, k,
// save_mean, ...); y is read only when non-null, dx written only when non-null.
template <bool kVec, typename Epi, typename Stat>
static __global__ void __launch_bounds__(kThreads)
    batchnorm_backward_one_kernel_nchw(ChannelLayout L, ChannelLayout G, Epi epi, Stat stat,
                                       const float* __restrict__ x, const float* __restrict__ y,
                                       const float* __restrict__ save_mean, const float* __restrict__ dy,
                                       float* __restrict__ dx, double* __restrict__ partial) {
  __shared__ double shared[kThreads / cuda::kWarpSize];
  __shared__ float coef[Stat::kCoefs];
  const int c = blockIdx.y;
  double s, sx;
  backward_slice_sums(L, epi, x, y, save_mean, dy, c, s, sx);
  store_slice_sums(partial, c, s, sx, shared);
  cooperative_groups::this_grid().sync();
  one_kernel_channel_coefs(stat, partial, c, 0.0f, coef);
  if (dx) dx_slice<kVec>(G, epi, c, coef[0], coef[1], coef[2], coef[3], x, y, dy, dx);
}

// Whether `path` asks for one kernel on this shape (automatic: small enough); a forced path on a
// shape it cannot take throws.
inline bool nchw_one_kernel_wanted(const BatchnormShape& sh, NhwcPath path, const char* what) {
  if (path == NhwcPath::two) return false;
  if (!nchw_one_kernel_fits(sh)) {
    if (path == NhwcPath::one)
      CNN_THROW("{}: N={} C={} H={} W={} does not fit the one-kernel path", what, sh.N, sh.C, sh.H, sh.W);
    return false;
  }
  return path == NhwcPath::one || sh.N * sh.C * sh.H * sh.W <= kOneKernelNchwValues;
}

// Launches kernel(args..., partial) on the grid (slices, C) cooperatively when the device holds it
// at once: returns whether it ran (a forced path that cannot run throws).
template <typename... KArgs, typename... Args>
static bool launch_cooperative_nchw(void (*kernel)(KArgs...), const ExecContext& ctx, cudaStream_t stream,
                                    const BatchnormShape& sh, NhwcPath path, const char* what, Args... args) {
  const int slices = slices_for(sh);
  if (!cooperative_grid_fits(reinterpret_cast<const void*>(kernel), int64_t{slices} * sh.C, path, what)) return false;
  double* partial = scratch(ctx, sh, slices, 0, what).partial;
  launch_cooperative(kernel, dim3(static_cast<unsigned>(slices), static_cast<unsigned>(sh.C)), dim3(kThreads), stream,
                     args..., partial);
  return true;
}

// The forward in one kernel when `path` and the device allow (see above): returns whether it ran.
template <typename Epi, typename Shift, typename Stat>
static bool forward_one_kernel_nchw(const ExecContext& ctx, cudaStream_t stream, const BatchnormShape& sh,
                                    NhwcPath path, const char* what, Epi epi, Shift shift, const Stat& stat,
                                    const float* x, float* y) {
  if (!nchw_one_kernel_wanted(sh, path, what)) return false;
  const ChannelLayout L = layout_of(sh);
  if ((sh.H * sh.W) % 4 == 0 && cuda::aligned16(x) && cuda::aligned16(y))
    return launch_cooperative_nchw(batchnorm_forward_one_kernel_nchw<true, Epi, Shift, Stat>, ctx, stream, sh, path,
                                   what, L, group_layout_of(sh), epi, shift, stat, x, y);
  return launch_cooperative_nchw(batchnorm_forward_one_kernel_nchw<false, Epi, Shift, Stat>, ctx, stream, sh, path,
                                 what, L, L, epi, shift, stat, x, y);
}

// The backward in one kernel when `path` and the device allow: returns whether it ran.
template <typename Epi, typename Stat>
static bool backward_one_kernel_nchw(const ExecContext& ctx, cudaStream_t stream, const BatchnormShape& sh,
                                     NhwcPath path, const char* what, Epi epi, const Stat& stat, const float* x,
                                     const float* y, const float* save_mean, const float* dy, float* dx) {
  if (!nchw_one_kernel_wanted(sh, path, what)) return false;
  const ChannelLayout L = layout_of(sh);
  const bool aligned =
      cuda::aligned16(x) && cuda::aligned16(dy) && (!dx || cuda::aligned16(dx)) && (!y || cuda::aligned16(y));
  if ((sh.H * sh.W) % 4 == 0 && aligned)
    return launch_cooperative_nchw(batchnorm_backward_one_kernel_nchw<true, Epi, Stat>, ctx, stream, sh, path, what, L,
                                   group_layout_of(sh), epi, stat, x, y, save_mean, dy, dx);
  return launch_cooperative_nchw(batchnorm_backward_one_kernel_nchw<false, Epi, Stat>, ctx, stream, sh, path, what, L,
                                 L, epi, stat, x, y, save_mean, dy, dx);
}

}  // namespace cnn
