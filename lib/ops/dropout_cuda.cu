// Inverted dropout on the GPU: one thread per Philox block of 4 counters (offset + i), so each
// philox4x32 is drawn once and the mask equals the CPU's bit for bit; with 16-byte packs a thread
// takes one pack (four floats: one block; eight bf16 or f16: two blocks). y may alias x. T is float,
// bf16 or f16 (BF16 / FP16 training: the element is widened, masked and scaled in float, rounded
// once; the mask is indexed by the storage index, so the layout does not matter).
// Trap: blocks are aligned to the counter, not to i: with offset % 4 != 0 the first and last blocks
// are partial and misaligned, so packs need offset % 4 == 0 and aligned pointers (and a full pack).
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

// Counters per thread step: one pack when kVec, else one Philox block.
template <typename T, bool kVec>
constexpr int counters_per_step() {
  return kVec ? cuda::Lanes<T>::kWidth : 4;
}

// Element i of the call uses counter first + i; step g of a thread covers the kStep counters from
// base + kStep g, base being first rounded down to a Philox block (first itself when kVec). With
// seed_step (device memory) the seed is seed_step[0] ^ seed and first gains seed_step[1] << 32,
// which keeps first % 4, so the launch shape the host chose still fits.
template <typename T, bool kVec>
static __global__ void dropout_mask_philox_kernel(uint64_t seed, uint64_t first, int64_t n, float p, float scale,
                                                  const uint64_t* __restrict__ seed_step,  // (2) or null
                                                  const T* in,  // (n)
                                                  T* out) {     // (n)
  constexpr int kStep = counters_per_step<T, kVec>();
  constexpr int kBlocks = kStep / 4;  // Philox blocks per step
  if (seed_step) {
    seed ^= seed_step[0];
    first += seed_step[1] << 32;
  }
  const uint64_t block0 = first >> 2;
  const int64_t steps = static_cast<int64_t>((first + static_cast<uint64_t>(n) - 1 - 4 * block0) / kStep + 1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < steps; g += stride) {
    Philox4 r[kBlocks];
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) r[b] = philox4x32(seed, kDropoutStream, block0 + kBlocks * g + b);
    if (kVec && kStep * g + kStep <= n) {  // first % 4 == 0: step g is exactly elements [kStep g, kStep g + kStep)
      cuda::Lanes<T> v = cuda::load_lanes(in, g);
#pragma unroll
      for (int k = 0; k < kStep; ++k) v.v[k] = keep_or_drop(r[k / 4].v[k % 4], p, scale, v.v[k]);
      cuda::store_lanes(out, g, v);
      continue;
    }
#pragma unroll
    for (int k = 0; k < kStep; ++k) {  // a partial block (first or last), or unaligned data
      const uint64_t counter = 4 * block0 + kStep * static_cast<uint64_t>(g) + k;
      if (counter < first || counter - first >= static_cast<uint64_t>(n)) continue;
      const int64_t i = static_cast<int64_t>(counter - first);
      cuda::store_one(out, i, keep_or_drop(r[k / 4].v[k % 4], p, scale, cuda::load_one(in, i)));
    }
  }
}

static void check_params(const char* what, const DropoutParams& prm, int64_t n) {
  if (!(prm.p >= 0.0f && prm.p < 1.0f)) CNN_THROW("{}: p must be in [0, 1), got {}", what, prm.p);
  if (n < 0) CNN_THROW("{}: element count must be non-negative, got {}", what, n);
}

template <typename T>
static void launch_mask(const ExecContext& ctx, const char* what, const DropoutParams& prm, int64_t n, const T* in,
                        T* out) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_params(what, prm, n);
  if (n == 0) return;
  if (prm.p == 0.0f) {  // nothing is dropped (u < 0 never holds) and the scale is 1, as on the CPU
    if (in != out)
      CUDA_CHECK(cudaMemcpyAsync(out, in, static_cast<size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const float scale = 1.0f / (1.0f - prm.p);
  const bool vec = prm.offset % 4 == 0 && cuda::aligned16(in) && cuda::aligned16(out);
  const int step = vec ? cuda::Lanes<T>::kWidth : 4;
  const uint64_t base = prm.offset & ~uint64_t{3};
  const int64_t steps = static_cast<int64_t>((prm.offset + static_cast<uint64_t>(n) - 1 - base) / step + 1);
  const unsigned grid = cuda::grid_blocks(steps, kThreads);
  if (vec)
    dropout_mask_philox_kernel<T, true><<<grid, kThreads, 0, stream>>>(prm.seed, prm.offset, n, prm.p, scale,
                                                                       prm.device_seed_step, in, out);
  else
    dropout_mask_philox_kernel<T, false><<<grid, kThreads, 0, stream>>>(prm.seed, prm.offset, n, prm.p, scale,
                                                                        prm.device_seed_step, in, out);
  CUDA_CHECK_LAUNCH(what);
}

void dropout_forward_cuda(const DropoutForward& a) {
  launch_mask(*a.ctx, "dropout forward", a.prm, a.n, a.x.f32(), a.y.f32());
}
void dropout_forward_cuda_bf16(const DropoutForward& a) {
  launch_mask(*a.ctx, "dropout forward", a.prm, a.n, a.x.bf16_data(), a.y.bf16_data());
}
void dropout_forward_cuda_f16(const DropoutForward& a) {
  launch_mask(*a.ctx, "dropout forward", a.prm, a.n, a.x.f16_data(), a.y.f16_data());
}

void dropout_backward_cuda(const DropoutBackward& a) {
  launch_mask(*a.ctx, "dropout backward", a.prm, a.n, a.dy.f32(), a.dx.f32());
}
void dropout_backward_cuda_bf16(const DropoutBackward& a) {
  launch_mask(*a.ctx, "dropout backward", a.prm, a.n, a.dy.bf16_data(), a.dx.bf16_data());
}
void dropout_backward_cuda_f16(const DropoutBackward& a) {
  launch_mask(*a.ctx, "dropout backward", a.prm, a.n, a.dy.f16_data(), a.dx.f16_data());
}

}  // namespace cnn
