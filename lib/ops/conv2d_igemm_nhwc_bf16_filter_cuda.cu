// NHWC BF16 implicit-GEMM filter gradient on tensor cores (conv2d_igemm_nhwc_bf16.h):
// dw (K, R*S*C) = dy^T (K, N*P*Q) * x gathered (N*P*Q, R*S*C). Both operands are pixel-major in
// memory (channels contiguous), so the shared tiles are [32 pixels][cols + 8] and ldmatrix.trans
// makes the fragments. With db, column R*S*C of the gathered operand is a column of ones (one more
// 16-byte chunk, copied from a constant), so db[k] comes out of the same FP32 tensor-core sums.
// The result is stored permuted to (K, C, R, S), the FP32 master's layout; a split reduction
// writes FP32 partials (split, K, R*S*C + db) that a second kernel adds in split order.
// Trap: with dw null and db wanted, a plain column sum of dy runs instead of the GEMM.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d_igemm_nhwc_bf16.cuh"
#include "ops/conv2d_igemm_nhwc_bf16.h"
#include "ops/conv2d_igemm_nhwc_bf16_layout.h"
#include "ops/reduce.cuh"

namespace cnn {

using namespace igemm_nhwc_bf16_detail;

// The bias column's chunk: 1.0 then seven zeros (the columns past the last, which read as zero).
__device__ __align__(16) const uint16_t kOnesChunk[8] = {0x3f80, 0, 0, 0, 0, 0, 0, 0};

struct FilterGemmParams {
  NhwcGather g;               // forward decoder: B(column crs, reduction npq) = x at row npq, tap crs
  Div div_c;                  // column -> (rs, c)
  int M, N, rsc, red, chunk;  // M = K, N = rsc (+ 1 with db), rsc = R*S*C, red = N*P*Q; chunk per split
  int RS, CRS;
  bool db;  // column rsc is the ones column
};

// A: dy (npq, k) -> tile [BK][BM + 8]. Thread t copies chunk t % (BM / 8) (8 channels) of
// pixel rows t / (BM / 8) + i * (threads / (BM / 8)).
template <class T, bool kVec>
struct DyRows {
  static constexpr int kChunks = T::BM / 8, kRowStep = T::kThreads / kChunks, kRows = T::BK / kRowStep;
  const uint16_t* dy;
  int K, k0, red_begin, red_end, r0, c8;
  __device__ __forceinline__ DyRows(const uint16_t* dy_, int K_, int m0, int red_begin_, int red_end_)
      : dy(dy_),
        K(K_),
        k0(m0 + int(threadIdx.x) % kChunks * 8),
        red_begin(red_begin_),
        red_end(red_end_),
        r0(int(threadIdx.x) / kChunks),
        c8(int(threadIdx.x) % kChunks) {}
  __device__ __forceinline__ void load(int step, uint16_t* s) const {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = r0 + i * kRowStep, npq = red_begin + step * T::BK + row;
      uint16_t* dst = s + row * T::kLdAm + c8 * 8;
      if constexpr (kVec) {  // K % 8 == 0: the chunk is in or out whole
        const bool ok = k0 < K && npq < red_end;
        cp_async_16(dst, ok ? dy + (npq * K + k0) : dy, ok);
      } else {
        uint16_t v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] = k0 + e < K && npq < red_end ? __ldg(dy + (npq * K + k0 + e)) : uint16_t(0);
        store_chunk(dst, v);
      }
    }
  }
};

// B: x gathered -> tile [BK][BN + 8]. Thread t copies chunk t % (BN / 8) (8 columns, decoded
// once) of pixel rows t / (BN / 8) + i * (threads / (BN / 8)); each row's window is decoded per step.
template <class T, bool kVec>
struct XRows {
  static constexpr int kChunks = T::BN / 8, kRowStep = T::kThreads / kChunks, kRows = T::BK / kRowStep;
  const NhwcGather& g;
  const uint16_t* x;
  int red_begin, red_end, r0, c8;
  NhwcPos taps[kVec ? 1 : 8];
  uint32_t gather_mask = 0, ones_mask = 0;  // per column of the chunk (kVec: bit 0 for the chunk)

  __device__ __forceinline__ XRows(const FilterGemmParams& p, const uint16_t* x_, int n0, int red_begin_, int red_end_)
      : g(p.g),
        x(x_),
        red_begin(red_begin_),
        red_end(red_end_),
        r0(int(threadIdx.x) / kChunks),
        c8(int(threadIdx.x) % kChunks) {
    const int col0 = n0 + c8 * 8;
#pragma unroll
    for (int e = 0; e < (kVec ? 1 : 8); ++e) {
      const int col = col0 + e;
      taps[e] = g.template tap_as<false>(col < p.rsc ? col : 0);
      if (col < p.rsc) gather_mask |= 1u << e;
      if (p.db && col == p.rsc) ones_mask |= 1u << e;
    }
  }
  __device__ __forceinline__ void load(int step, uint16_t* s) const {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = r0 + i * kRowStep, npq = red_begin + step * T::BK + row;
      const bool in = npq < red_end;
      const NhwcPos pos = g.template row_as<false>(in ? npq : 0);
      uint16_t* dst = s + row * T::kLdBn + c8 * 8;
      if constexpr (kVec) {  // C % 8 == 0: the chunk is one tap's 8 channels, or the ones chunk
        const bool ones = ones_mask != 0;
        const bool ok = in && (ones || (gather_mask != 0 && g.template valid_as<false>(pos, taps[0])));
        const uint16_t* src = ones ? kOnesChunk : x + (pos.off + taps[0].off);
        cp_async_16(dst, ok ? src : x, ok);
      } else {
        uint16_t v[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const bool gather = in && ((gather_mask >> e) & 1u) && g.template valid_as<false>(pos, taps[e]);
          v[e] = gather                          ? __ldg(x + (pos.off + taps[e].off))
                 : in && ((ones_mask >> e) & 1u) ? uint16_t(0x3f80)
                                                 : uint16_t(0);
        }
        store_chunk(dst, v);
      }
    }
  }
};

template <class T, bool kVec>
static __global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    conv2d_backward_filter_igemm_nhwc_bf16_kernel(const __grid_constant__ FilterGemmParams p,
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
  const PairLoader<DyRows<T, kVec>, XRows<T, kVec>> ld{DyRows<T, kVec>(dy, p.M, m0, red_begin, red_end),
                                                       XRows<T, kVec>(p, x, n0, red_begin, red_end)};
  float acc[T::MI][T::NI][4];
  mainloop<T, true, true>(ld, (red_end - red_begin + T::BK - 1) / T::BK, acc, smem);
  if (gridDim.z > 1) {
    igemm_bf16_detail::store_rows_fp32<T>(acc, parts + int64_t(blockIdx.z) * p.M * p.N, p.M, p.N, m0, n0, p.N % 2 == 0);
    return;
  }
  const Fragments<T> f;
#pragma unroll
  for (int mi = 0; mi < T::MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int k = m0 + f.row(mi, half);
      if (k >= p.M) continue;
#pragma unroll
      for (int ni = 0; ni < T::NI; ++ni)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int col = n0 + f.col(ni) + e;
          const float v = acc[mi][ni][2 * half + e];
          if (col < p.rsc) {
            int rs, c;
            p.div_c.divmod(col, rs, c);
            dw[k * p.CRS + c * p.RS + rs] = v;
          } else if (col == p.rsc && p.db) {
            db[k] = v;
          }
        }
    }
}

// dw[k, c, r, s] / db[k] = the sum over splits, in split order, of parts (splits, K, N).
static __global__ void conv2d_backward_filter_igemm_nhwc_bf16_sum_kernel(const __grid_constant__ FilterGemmParams p,
                                                                         const float* __restrict__ parts, int splits,
                                                                         float* __restrict__ dw,
                                                                         float* __restrict__ db) {
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
static __global__ void __launch_bounds__(256)
    conv2d_backward_bias_nhwc_bf16_kernel(const uint16_t* __restrict__ dy,  // (rows, K)
                                          int rows, int K, int per_slice,
                                          float* __restrict__ parts) {  // (slices, K)
  __shared__ float lanes[8][32];
  const int k = int(blockIdx.x) * 32 + int(threadIdx.x) % 32, lane = int(threadIdx.x) / 32;
  const int begin = int(blockIdx.y) * per_slice, end = min(rows, begin + per_slice);
  float s = 0.0f;
  if (k < K)
    for (int j = begin + lane; j < end; j += 8) s += float_from_bf16_bits(__ldg(dy + (int64_t(j) * K + k)));
  lanes[lane][threadIdx.x % 32] = s;
  __syncthreads();
  if (lane == 0 && k < K) {
    float t = 0.0f;
    for (int l = 0; l < 8; ++l) t += lanes[l][threadIdx.x];
    parts[int64_t(blockIdx.y) * K + k] = t;
  }
}

// out[k] = sum over slices, in order, of parts (slices, K).
static __global__ void conv2d_backward_bias_nhwc_bf16_sum_kernel(const float* __restrict__ parts, int slices, int K,
                                                                 float* __restrict__ out) {
  for (int k = int(blockIdx.x * blockDim.x + threadIdx.x); k < K; k += int(gridDim.x * blockDim.x)) {
    float s = 0.0f;
    for (int j = 0; j < slices; ++j) s += parts[int64_t(j) * K + k];
    out[k] = s;
  }
}

void conv2d_backward_filter_igemm_nhwc_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x,
                                                 const bf16* dy, float* dw, float* db,
                                                 const IgemmNhwcBf16Plan* plan_in) {
  const char* what = "conv2d backward filter igemm nhwc bf16";
  const ConvDir dir = ConvDir::backward_filter;
  cudaStream_t stream = cuda::stream_of(ctx, what);
  if (!conv2d_igemm_nhwc_bf16_can_implement(sh))
    CNN_THROW("{}: cannot implement {} (needs groups == 1 and every tensor under 2^31 elements)", what, sh.to_string());
  const IgemmNhwcBf16Plan plan =
      plan_in ? *plan_in : conv2d_igemm_nhwc_bf16_choose_plan(sh, dir, multiprocessors(), ctx.workspace_limit_bytes);
  conv2d_igemm_nhwc_bf16_tile_info(plan.tile);  // throws for a bad index
  CNN_CHECK(plan.splits >= 1, "{}: plan splits must be >= 1, got {}", what, plan.splits);
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  const auto* dys = reinterpret_cast<const uint16_t*>(dy);
  const bool want_db = db != nullptr;
  const int splits = conv2d_igemm_nhwc_bf16_effective_splits(sh, dir, plan);
  const IgemmNhwcBf16WorkspaceLayout layout = igemm_nhwc_bf16_workspace_layout(sh, dir, splits, want_db);
  auto* ws = layout.total ? static_cast<unsigned char*>(cuda::workspace_bytes(ctx, layout.total, what)) : nullptr;
  if (!dw) {
    if (!db) return;
    const int rows = int(sh.N * sh.P * sh.Q), slices = igemm_nhwc_bf16_db_slices(sh);
    auto* parts = reinterpret_cast<float*>(ws + layout.db_partial);
    conv2d_backward_bias_nhwc_bf16_kernel<<<dim3(unsigned((sh.K + 31) / 32), unsigned(slices)), 256, 0, stream>>>(
        dys, rows, int(sh.K), (rows + slices - 1) / slices, parts);
    CUDA_CHECK_LAUNCH(what);
    conv2d_backward_bias_nhwc_bf16_sum_kernel<<<cuda::grid_blocks(sh.K, 256), 256, 0, stream>>>(parts, slices,
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
  auto go = [&](auto vec_tag) {
    constexpr bool kVec = decltype(vec_tag)::value;
    with_tile<kVec>(plan.tile, [&](auto t) {
      using T = decltype(t);
      launch(what, conv2d_backward_filter_igemm_nhwc_bf16_kernel<T, kVec>, gemm_grid<T>(g.m, g.n, splits), T::kThreads,
             T::template smem_bytes<true, true>(), stream, p, xs, dys, dw, db, parts);
    });
  };
  vec ? go(std::true_type{}) : go(std::false_type{});
  if (splits > 1) {
    conv2d_backward_filter_igemm_nhwc_bf16_sum_kernel<<<cuda::grid_blocks(g.m * g.n, 256), 256, 0, stream>>>(
        p, parts, splits, dw, db);
    CUDA_CHECK_LAUNCH(what);
  }
}

}  // namespace cnn
