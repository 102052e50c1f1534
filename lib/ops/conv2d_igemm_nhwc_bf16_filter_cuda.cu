// NHWC BF16 implicit-GEMM filter gradient on tensor cores (conv2d_igemm_nhwc_bf16.h):
// dw (K, R*S*C) = dy^T (K, N*P*Q) * x gathered (N*P*Q, R*S*C). Both operands are pixel-major in
// memory (channels contiguous), so the shared tiles are [32 pixels][cols + 8] and ldmatrix.trans
// makes the fragments. With db, column R*S*C of the gathered operand is a column of ones (one more
// 16-byte chunk, copied from a constant), so db[k] comes out of the same FP32 tensor-core sums.
// The result is stored permuted to (K, C, R, S), the FP32 master's layout; a split reduction
// writes FP32 partials (split, K, R*S*C + db) that a second kernel adds in split order.
// E, the element type of x and dy (bf16 or f16), is a template parameter of the kernels.
// Trap: with dw null and db wanted, a plain column sum of dy runs instead of the GEMM.
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

template <class E, class T, bool kVec>
static __global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    conv2d_backward_filter_igemm_nhwc_kernel(const __grid_constant__ FilterGemmParams p,
                                                  const uint16_t* __restrict__ x,   // (N, H, W, C)
                                                  const uint16_t* __restrict__ dy,  // (N, P, Q, K)
                                                  float* __restrict__ dw,           // (K, C, R, S) or null
                                                  float* __restrict__ db,           // (K) or null
                                                  float* __restrict__ parts) {      // (splits, K, N) if split
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* smem = reinterpret_cast<uint16_t*>(smem_raw);
  int m0, n0;
  block_origin<T>(p.N, m0, n0);
  const int red_begin = int(blockIdx.z) * p.chunk, red_end = min(p.red, red_begin + p.chunk);
  const PairLoader<DyRows<T, kVec>, XRows<E, T, kVec>> ld{DyRows<T, kVec>(dy, p.M, m0, red_begin, red_end),
                                                          XRows<E, T, kVec>(p, x, n0, red_begin, red_end)};
  float acc[T::MI][T::NI][4];
  mainloop<E, T, true, true>(ld, (red_end - red_begin + T::BK - 1) / T::BK, acc, smem);
  auto each = [&](auto&& fn) { for_each_pair<T>(acc, fn); };
  if (gridDim.z > 1)
    store_rows_fp32(each, parts + int64_t(blockIdx.z) * p.M * p.N, p.M, p.N, m0, n0);
  else
    store_filter(each, p, dw, db, m0, n0);
}

// dw[k, c, r, s] / db[k] = the sum over splits, in split order, of parts (splits, K, N).
static __global__ void conv2d_backward_filter_igemm_nhwc_sum_kernel(const __grid_constant__ FilterGemmParams p,
                                                                    const float* __restrict__ parts, int splits,
                                                                    float* __restrict__ dw, float* __restrict__ db) {
  const int count = p.M * p.N;
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < count; i += int(gridDim.x * blockDim.x)) {
    float s = 0.0f;
    for (int j = 0; j < splits; ++j) s += parts[int64_t(j) * count + i];
    const int k = i / p.N, col = i % p.N;
    if (col < p.rsc) {
      int rs, c;
      p.div_c.divmod(col, rs, c);
      if (dw) dw[k * p.CRS + c * p.RS + rs] = s;
    } else if (db) {
      db[k] = s;
    }
  }
}

// Bias gradient alone: parts[slice, k] = the sum of dy[j, k] over the slice's rows j, in a fixed
// order (8 row lanes strided, then the lanes in order). Block: 32 channels x 8 row lanes.
template <class E>
static __global__ void __launch_bounds__(256)
    conv2d_backward_bias_nhwc_kernel(const uint16_t* __restrict__ dy,  // (rows, K)
                                          int rows, int K, int per_slice,
                                          float* __restrict__ parts) {  // (slices, K)
  __shared__ float lanes[8][32];
  const int k = int(blockIdx.x) * 32 + int(threadIdx.x) % 32, lane = int(threadIdx.x) / 32;
  const int begin = int(blockIdx.y) * per_slice, end = min(rows, begin + per_slice);
  float s = 0.0f;
  if (k < K)
    for (int j = begin + lane; j < end; j += 8) s += Half16<E>::to_float(__ldg(dy + (int64_t(j) * K + k)));
  lanes[lane][threadIdx.x % 32] = s;
  __syncthreads();
  if (lane == 0 && k < K) {
    float t = 0.0f;
    for (int l = 0; l < 8; ++l) t += lanes[l][threadIdx.x];
    parts[int64_t(blockIdx.y) * K + k] = t;
  }
}

// out[k] = sum over slices, in order, of parts (slices, K).
static __global__ void conv2d_backward_bias_nhwc_sum_kernel(const float* __restrict__ parts, int slices, int K,
                                                            float* __restrict__ out) {
  for (int k = int(blockIdx.x * blockDim.x + threadIdx.x); k < K; k += int(gridDim.x * blockDim.x)) {
    float s = 0.0f;
    for (int j = 0; j < slices; ++j) s += parts[int64_t(j) * K + k];
    out[k] = s;
  }
}

template <class E>
static void backward_filter(const ExecContext& ctx, const Conv2dShape& sh, const E* x, const E* dy, float* dw,
                            float* db, const IgemmNhwcBf16Plan* plan_in, const char* what) {
  const ConvDir dir = ConvDir::backward_filter;
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  const auto* dys = reinterpret_cast<const uint16_t*>(dy);
  const bool want_db = db != nullptr;
  const NhwcCall c = prepare_call(ctx, sh, dir, plan_in, want_db, what);
  const IgemmNhwcBf16Plan plan = c.plan;
  const int splits = c.splits;
  cudaStream_t stream = c.stream;
  unsigned char* ws = c.ws;
  const IgemmNhwcBf16WorkspaceLayout& layout = c.layout;
  if (!dw) {
    if (!db) return;
    const int rows = int(sh.N * sh.P * sh.Q), slices = igemm_nhwc_bf16_db_slices(sh);
    auto* parts = reinterpret_cast<float*>(ws + layout.db_partial);
    conv2d_backward_bias_nhwc_kernel<E><<<dim3(unsigned((sh.K + 31) / 32), unsigned(slices)), 256, 0, stream>>>(
        dys, rows, int(sh.K), (rows + slices - 1) / slices, parts);
    CUDA_CHECK_LAUNCH(what);
    conv2d_backward_bias_nhwc_sum_kernel<<<cuda::grid_blocks(sh.K, 256), 256, 0, stream>>>(parts, slices,
                                                                                           int(sh.K), db);
    CUDA_CHECK_LAUNCH(what);
    return;
  }
  const IgemmBf16Gemm g = conv2d_igemm_nhwc_bf16_gemm(sh, dir, want_db);
  const FilterGemmParams p{NhwcGather::forward(sh),
                           Div(sh.C),
                           int(g.m),
                           int(g.n),
                           int(sh.R * sh.S * sh.C),
                           int(g.red),
                           int(igemm_nhwc_bf16_split_chunk(g.red, splits)),
                           int(sh.R * sh.S),
                           int(sh.C * sh.R * sh.S),
                           want_db};
  float* parts = splits > 1 ? reinterpret_cast<float*>(ws + layout.partial) : nullptr;
  const bool vec = conv2d_igemm_nhwc_bf16_vectorized(sh, dir) && cuda::aligned16(x) && cuda::aligned16(dy);
  if (vec && plan.tile >= kIgemmNhwcBf16WgmmaFirst && igemm_nhwc_bf16_wgmma_usable()) {
    igemm_nhwc_bf16_wgmma_filter(DTypeOf<E>::value, stream, plan.tile, splits, p, xs, dys, dw, db, parts);
  } else {
    auto go = [&](auto vec_tag) {
      constexpr bool kVec = decltype(vec_tag)::value;
      with_tile<kVec>(plan.tile, [&](auto t) {
        using T = decltype(t);
        launch(what, conv2d_backward_filter_igemm_nhwc_kernel<E, T, kVec>, gemm_grid<T>(g.m, g.n, splits),
               T::kThreads, T::template smem_bytes<true, true>(), stream, p, xs, dys, dw, db, parts);
      });
    };
    vec ? go(std::true_type{}) : go(std::false_type{});
  }
  if (splits > 1) {
    conv2d_backward_filter_igemm_nhwc_sum_kernel<<<cuda::grid_blocks(g.m * g.n, 256), 256, 0, stream>>>(
        p, parts, splits, dw, db);
    CUDA_CHECK_LAUNCH(what);
  }
}

void conv2d_backward_filter_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x,
                                            const bf16* dy, float* dw, float* db, const IgemmNhwcBf16Plan* plan) {
  backward_filter(ctx, sh, x, dy, dw, db, plan, "conv2d backward filter igemm nhwc bf16");
}
void conv2d_backward_filter_igemm_nhwc_cuda(const ExecContext& ctx, const Conv2dShape& sh, const f16* x, const f16* dy,
                                            float* dw, float* db, const IgemmNhwcBf16Plan* plan) {
  backward_filter(ctx, sh, x, dy, dw, db, plan, "conv2d backward filter igemm nhwc f16");
}

}  // namespace cnn
