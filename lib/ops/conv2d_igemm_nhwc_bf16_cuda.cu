// NHWC BF16 implicit-GEMM convolution on tensor cores (conv2d_igemm_nhwc_bf16.h): forward and
// backward data. Both are one kernel: A = the gathered activation rows (x for forward, dy for the
// data gradient), B = the packed weight rows (krsc, crsk), out = the NHWC output, which is the
// GEMM's row-major (M, N) result. A split reduction writes FP32 partials (split, M, N) and a
// second kernel adds them in split order (+ bias, ReLU, rounding). E, the element type (bf16 or
// f16), is a template parameter of every kernel; the entry points instantiate both.
// Tiles kIgemmNhwcBf16WgmmaFirst.. run the sm_90a wgmma kernels (conv2d_igemm_nhwc_bf16_wgmma.h).
// Trap: a plan's tile is honoured only for the 16-byte kernels; the scalar ones have tile 7, and
// a wgmma tile on a device without wgmma runs its mma.sync stand-in (with_tile).
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d_igemm_nhwc_bf16.cuh"
#include "ops/conv2d_igemm_nhwc_bf16.h"
#include "ops/conv2d_igemm_nhwc_bf16_layout.h"
#include "ops/conv2d_igemm_nhwc_bf16_wgmma.h"
#include "ops/reduce.cuh"

namespace cnn {

using namespace igemm_nhwc_bf16_detail;

// out (M, N) = gathered A (M, red) * B (N, red)^T [+ bias, relu], or the split's FP32 partials.
template <class E, class T, bool kVec, bool kData>
static __global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    conv2d_gather_igemm_nhwc_kernel(const __grid_constant__ GatherGemmParams p,
                                         const uint16_t* __restrict__ a_src,  // x (N,H,W,C) or dy (N,P,Q,K)
                                         const uint16_t* __restrict__ b_src,  // w (K,R,S,C) or wt (C,R,S,K)
                                         const float* __restrict__ bias,      // (N) or null
                                         uint16_t* __restrict__ out,          // (M, N): y or dx
                                         float* __restrict__ parts) {         // (splits, M, N) if split
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* smem = reinterpret_cast<uint16_t*>(smem_raw);
  int m0, n0;
  block_origin<T>(p.N, m0, n0);
  const int red_begin = int(blockIdx.z) * p.chunk, red_end = min(p.red, red_begin + p.chunk);
  const PairLoader<GatherRows<T, kVec, kData>, PlainRows<T, kVec>> ld{
      GatherRows<T, kVec, kData>(p.g, a_src, p.M, m0, red_begin, red_end),
      PlainRows<T, kVec>(b_src, p.red, p.N, n0, red_begin, red_end)};
  float acc[T::MI][T::NI][4];
  mainloop<E, T, false, false>(ld, (red_end - red_begin + T::BK - 1) / T::BK, acc, smem);
  auto each = [&](auto&& fn) { for_each_pair<T>(acc, fn); };
  if (gridDim.z > 1)
    store_rows_fp32(each, parts + int64_t(blockIdx.z) * p.M * p.N, p.M, p.N, m0, n0);
  else
    store_rows_half16<E, T::BM, T::BN, T::kThreads>(each, bias, p.relu, out, p.M, p.N, m0, n0, p.vec_out, smem);
}

// out[m, n] = relu?(sum over splits s = 0, 1, ... of parts[s, m, n] + bias[n]), rounded once.
template <class E>
static __global__ void conv2d_igemm_nhwc_sum_splits_kernel(const float* __restrict__ parts,  // (splits, M, N)
                                                           int splits, int64_t count, int N,
                                                           const float* __restrict__ bias,  // (N) or null
                                                           bool relu,
                                                           uint16_t* __restrict__ out) {  // (M, N)
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int j = 0; j < splits; ++j) s += parts[j * count + i];
    if (bias) s += __ldg(bias + i % N);
    if (relu) s = fmaxf(s, 0.0f);
    out[i] = Half16<E>::from_float(s);
  }
}

// ---- launch ----

// One forward or data-gradient call: the plan, its workspace, the kernel of its tile (E: bf16 or f16).
template <bool kData, class E>
static void run_gather(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const E* a, const E* b,
                       const float* bias, bool relu, E* y, const IgemmNhwcBf16Plan* plan_in, const char* what) {
  const auto* a_src = reinterpret_cast<const uint16_t*>(a);
  const auto* b_src = reinterpret_cast<const uint16_t*>(b);
  auto* out = reinterpret_cast<uint16_t*>(y);
  const NhwcCall c = prepare_call(ctx, sh, dir, plan_in, false, what);
  const IgemmNhwcBf16Plan plan = c.plan;
  const int splits = c.splits;
  cudaStream_t stream = c.stream;
  const IgemmBf16Gemm g = conv2d_igemm_nhwc_bf16_gemm(sh, dir);
  float* parts = splits > 1 ? reinterpret_cast<float*>(c.ws + c.layout.partial) : nullptr;
  const GatherGemmParams p{kData ? NhwcGather::backward_data(sh) : NhwcGather::forward(sh),
                           int(g.m),
                           int(g.n),
                           int(g.red),
                           int(igemm_nhwc_bf16_split_chunk(g.red, splits)),
                           g.n % 8 == 0 && cuda::aligned16(out),
                           relu};
  const bool vec = conv2d_igemm_nhwc_bf16_vectorized(sh, dir) && cuda::aligned16(a_src) && cuda::aligned16(b_src);
  if (vec && plan.tile >= kIgemmNhwcBf16WgmmaFirst && igemm_nhwc_bf16_wgmma_usable()) {
    igemm_nhwc_bf16_wgmma_gather(DTypeOf<E>::value, stream, plan.tile, kData, splits, p, a_src, b_src, bias, out,
                                 parts);
  } else {
    auto go = [&](auto vec_tag) {
      constexpr bool kVec = decltype(vec_tag)::value;
      with_tile<kVec>(plan.tile, [&](auto t) {
        using T = decltype(t);
        launch(what, conv2d_gather_igemm_nhwc_kernel<E, T, kVec, kData>, gemm_grid<T>(g.m, g.n, splits), T::kThreads,
               T::template smem_bytes<false, false>(), stream, p, a_src, b_src, bias, out, parts);
      });
    };
    vec ? go(std::true_type{}) : go(std::false_type{});
  }
  if (splits > 1) {
    const int64_t count = g.m * g.n;
    conv2d_igemm_nhwc_sum_splits_kernel<E><<<cuda::grid_blocks(count, 256), 256, 0, stream>>>(
        parts, splits, count, int(g.n), bias, relu, out);
    CUDA_CHECK_LAUNCH(what);
  }
}

// ---- entry points ----

bool conv2d_igemm_nhwc_bf16_wgmma_usable() { return igemm_nhwc_bf16_wgmma_usable(); }

IgemmNhwcBf16Plan conv2d_igemm_nhwc_bf16_device_plan(const Conv2dShape& sh, ConvDir dir, size_t workspace_limit) {
  return conv2d_igemm_nhwc_bf16_choose_plan(sh, dir, multiprocessors(), workspace_limit, igemm_nhwc_bf16_wgmma_usable());
}

void conv2d_forward_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x, const bf16* w,
                                    const float* b, bf16* y, bool relu, const IgemmNhwcBf16Plan* plan) {
  run_gather<false>(ctx, sh, ConvDir::forward, x, w, b, relu, y, plan, "conv2d forward igemm nhwc bf16");
}
void conv2d_forward_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* w,
                                    const float* b, f16* y, bool relu, const IgemmNhwcBf16Plan* plan) {
  run_gather<false>(ctx, sh, ConvDir::forward, x, w, b, relu, y, plan, "conv2d forward igemm nhwc f16");
}

void conv2d_backward_data_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* wt,
                                          const bf16* dy, bf16* dx, const IgemmNhwcBf16Plan* plan) {
  run_gather<true>(ctx, sh, ConvDir::backward_data, dy, wt, nullptr, false, dx, plan,
                   "conv2d backward data igemm nhwc bf16");
}
void conv2d_backward_data_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* wt, const f16* dy,
                                          f16* dx, const IgemmNhwcBf16Plan* plan) {
  run_gather<true>(ctx, sh, ConvDir::backward_data, dy, wt, nullptr, false, dx, plan,
                   "conv2d backward data igemm nhwc f16");
}

}  // namespace cnn
