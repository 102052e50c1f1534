// Inverted dropout on the GPU: one thread per Philox block of 4 counters (offset + i), so each
// philox4x32 is drawn once and the mask equals the CPU's bit for bit. y may alias x.
// Trap: blocks are aligned to the counter, not to i: with offset % 4 != 0 the first and last blocks
// are partial and misaligned, so float4 needs offset % 4 == 0 and aligned pointers (and a full block).
#include "core/cuda_check.h"
#include "core/rng.h"
#include "ops/dropout.h"
#include "ops/elementwise.cuh"

namespace cnn {

static constexpr int kThreads = 256;
static constexpr uint64_t kDropoutStream = static_cast<uint64_t>(RngStream::dropout);

__device__ __forceinline__ float keep_or_drop(uint32_t bits, float p, float scale, float v) {
  return uint_to_unit_float(bits) < p ? 0.0f : v * scale;
}

// Element i of the call uses counter first + i; block b covers counters [4b, 4b + 4). With
// seed_step (device memory) the seed is seed_step[0] ^ seed and first gains seed_step[1] << 32,
// which keeps first % 4, so the launch shape the host chose still fits.
template <bool kVec>
static __global__ void dropout_mask_philox_kernel(uint64_t seed, uint64_t first, int64_t n, float p, float scale,
                                                  const uint64_t* __restrict__ seed_step,  // (2) or null
                                                  const float* in,  // (n)
                                                  float* out) {     // (n)
  if (seed_step) {
    seed ^= seed_step[0];
    first += seed_step[1] << 32;
  }
  const uint64_t block0 = first >> 2;
  const int64_t blocks = static_cast<int64_t>(((first + static_cast<uint64_t>(n) - 1) >> 2) - block0 + 1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += stride) {
    const uint64_t block = block0 + static_cast<uint64_t>(b);
    const Philox4 r = philox4x32(seed, kDropoutStream, block);
    if (kVec && 4 * b + 4 <= n) {  // first % 4 == 0: block b is exactly elements [4b, 4b + 4)
      float4 v = cuda::load4(in, b);
      v.x = keep_or_drop(r.v[0], p, scale, v.x);
      v.y = keep_or_drop(r.v[1], p, scale, v.y);
      v.z = keep_or_drop(r.v[2], p, scale, v.z);
      v.w = keep_or_drop(r.v[3], p, scale, v.w);
      cuda::store4(out, b, v);
      continue;
    }
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {  // a partial block (first or last), or unaligned data
      const uint64_t counter = block * 4 + lane;
      if (counter < first || counter - first >= static_cast<uint64_t>(n)) continue;
      const int64_t i = static_cast<int64_t>(counter - first);
      out[i] = keep_or_drop(r.v[lane], p, scale, in[i]);
    }
  }
}

static void check_params(const char* what, const DropoutParams& prm, int64_t n) {
  if (!(prm.p >= 0.0f && prm.p < 1.0f)) CNN_THROW("{}: p must be in [0, 1), got {}", what, prm.p);
  if (n < 0) CNN_THROW("{}: element count must be non-negative, got {}", what, n);
}

static void launch_mask(const ExecContext& ctx, const char* what, const DropoutParams& prm, int64_t n, const float* in,
                        float* out) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_params(what, prm, n);
  if (n == 0) return;
  if (prm.p == 0.0f) {  // nothing is dropped (u < 0 never holds) and the scale is 1, as on the CPU
    if (in != out)
      CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const float scale = 1.0f / (1.0f - prm.p);
  const bool vec = prm.offset % 4 == 0 && cuda::aligned16(in) && cuda::aligned16(out);
  const int64_t blocks =
      static_cast<int64_t>(((prm.offset + static_cast<uint64_t>(n) - 1) >> 2) - (prm.offset >> 2) + 1);
  const unsigned grid = cuda::grid_blocks(blocks, kThreads);
  if (vec)
    dropout_mask_philox_kernel<true><<<grid, kThreads, 0, stream>>>(prm.seed, prm.offset, n, prm.p, scale,
                                                                    prm.device_seed_step, in, out);
  else
    dropout_mask_philox_kernel<false><<<grid, kThreads, 0, stream>>>(prm.seed, prm.offset, n, prm.p, scale,
                                                                     prm.device_seed_step, in, out);
  CUDA_CHECK_LAUNCH(what);
}

void dropout_forward_cuda(const DropoutForward& a) {
  launch_mask(*a.ctx, "dropout forward", a.prm, a.n, a.x.f32(), a.y.f32());
}

void dropout_backward_cuda(const DropoutBackward& a) {
  launch_mask(*a.ctx, "dropout backward", a.prm, a.n, a.dy.f32(), a.dx.f32());
}

}  // namespace cnn
