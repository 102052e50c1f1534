// BF16 implicit-GEMM convolution on tensor cores (conv2d_igemm_bf16.h), NCHW. Kernels:
//   forward / backward_data   A = weights (rows contiguous: cp.async ring when the row length is a
//                             multiple of 8, else scalar loads), B = x or dy gathered per element,
//                             output staged in shared memory and written as bf16 NCHW planes
//   backward_filter           A = dy rows (cp.async when P*Q % 8 == 0), B = x gathered with the
//                             reduction (n, p, q) contiguous, output FP32 (K, C*R*S)
// A split reduction writes FP32 partials (split, M, N) and a second kernel adds them in split
// order (+ bias, rounding, NCHW placement); db is a separate deterministic block sum over dy.
// Trap: the decoders turn every out-of-range tap or column into an invalid h, so padding, ragged
// tiles and the tails of the reduction read as zeros without special cases.
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>
#include <utility>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d_igemm_bf16.cuh"
#include "ops/conv2d_igemm_bf16.h"
#include "ops/conv2d_igemm_bf16_layout.h"
#include "ops/reduce.cuh"

namespace cnn {

using namespace igemm_bf16_detail;

template <class Decode>
struct GatherParams {
  int M, ncols, red, chunk, lda;  // GEMM view; chunk: reduction per split; lda: A's row length
  PlaneOut out;
  Decode dec;
};

struct FilterParams {
  int M, ncols, red, chunk;  // GEMM view: K, C*R*S, N*P*Q; chunk: reduction per split
  FilterDecode dec;
  bool pairs;  // ncols even and the output 8-byte aligned
};

// Both operands of the filter gradient: thread t takes reduction chunk t % 4 (8 consecutive n*P*Q
// positions, walked once for A and B) of A rows and B columns t / 4 + i * (threads / 4).
template <class T, bool kAsync>
struct FilterLoader {
  static constexpr bool kAsyncA = kAsync;
  static constexpr int kStep = T::kThreads / 4;
  static constexpr int kARows = T::BM / kStep, kBCols = T::BN / kStep;
  const FilterDecode& dec;
  const uint16_t* dy;
  const uint16_t* x;
  int red_begin, red_end, k8;
  int a_off[kARows];  // k * PQ, or -1 past the last k
  Tap bcol[kBCols];
  uint32_t aregs[kAsync ? 1 : kARows][4], bregs[kBCols][4];

  __device__ __forceinline__ FilterLoader(const FilterParams& p, const uint16_t* dy_, const uint16_t* x_, int m0,
                                          int n0, int red_begin_, int red_end_)
      : dec(p.dec), dy(dy_), x(x_), red_begin(red_begin_), red_end(red_end_), k8(int(threadIdx.x) % 4) {
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      const int k = m0 + line(i);
      a_off[i] = k < p.M ? k * dec.PQ : -1;
    }
#pragma unroll
    for (int i = 0; i < kBCols; ++i) {
      const int crs = n0 + line(i);
      bcol[i] = crs < p.ncols ? dec.column(crs) : invalid_tap();
    }
  }
  __device__ __forceinline__ static int line(int i) { return int(threadIdx.x) / 4 + i * kStep; }

  // Needs P*Q % 8 == 0 and a 16-byte aligned dy: 8 positions never straddle two images.
  __device__ __forceinline__ void copy(int step, uint16_t* sA) const {
    const int red = red_begin + step * T::BK + k8 * 8;
    const int at = red < red_end ? dec.dy_offset(dec.start(red)) : 0;
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
      const bool ok = a_off[i] >= 0 && red < red_end;
      cp_async_16(sA + line(i) * T::kLdA + k8 * 8, ok ? dy + (at + a_off[i]) : dy, ok);
    }
  }
  __device__ __forceinline__ void load(int step) {
    const int red0 = red_begin + step * T::BK + k8 * 8;
    FilterDecode::Walk pos = dec.start(red0 < red_end ? red0 : 0);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const bool rv = red0 + j < red_end;
      const Tap corner = dec.corner(pos);
#pragma unroll
      for (int i = 0; i < kBCols; ++i) {
        // & rather than &&: both sides are cheap, and a short circuit here becomes a branch per load.
        const uint32_t v = load_bf16_or_zero(x + (bcol[i].off + corner.off), rv & dec.valid(bcol[i], corner));
        bregs[i][j / 2] = (j & 1) ? (bregs[i][j / 2] | (v << 16)) : v;
      }
      if constexpr (!kAsync) {
        const int at = dec.dy_offset(pos);
#pragma unroll
        for (int i = 0; i < kARows; ++i) {
          const uint32_t v = load_bf16_or_zero(dy + (at + a_off[i]), rv & (a_off[i] >= 0));
          aregs[i][j / 2] = (j & 1) ? (aregs[i][j / 2] | (v << 16)) : v;
        }
      }
      dec.next(pos);
    }
  }
  __device__ __forceinline__ void store(uint16_t* sA, uint16_t* sB) const {
    if constexpr (!kAsync) {
#pragma unroll
      for (int i = 0; i < kARows; ++i)
        *reinterpret_cast<uint4*>(sA + line(i) * T::kLdA + k8 * 8) =
            make_uint4(aregs[i][0], aregs[i][1], aregs[i][2], aregs[i][3]);
    }
#pragma unroll
    for (int i = 0; i < kBCols; ++i)
      *reinterpret_cast<uint4*>(sB + line(i) * T::kLdBnk + k8 * 8) =
          make_uint4(bregs[i][0], bregs[i][1], bregs[i][2], bregs[i][3]);
  }
};

// ---- kernels ----

// Forward and data gradient: out (N, M, plane) = A (M, R) * gathered B (R, N*plane) [+ bias], or
// the split's FP32 partial (M, ncols) when the reduction is split (gridDim.z > 1).
template <class T, bool kAsyncA, bool kMask, class Decode>
__device__ __forceinline__ void gather_gemm(const GatherParams<Decode>& p, const uint16_t* a_src,
                                            const uint16_t* b_src, const float* bias, uint16_t* out,
                                            float* parts) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* sA = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sB = sA + (kAsyncA ? T::STAGES : 2) * T::kAStage;
  const int m0 = int(blockIdx.y) * T::BM, n0 = int(blockIdx.x) * T::BN;
  const int red_begin = int(blockIdx.z) * p.chunk, red_end = min(p.red, red_begin + p.chunk);
  PairLoader<RowsA<T, kAsyncA>, GatherKN<T, Decode, kMask>> ld{
      RowsA<T, kAsyncA>(a_src, p.lda, p.M, m0, red_begin, red_end),
      GatherKN<T, Decode, kMask>(b_src, p.dec, n0, p.ncols, red_begin, red_end)};
  float acc[T::MI][T::NI][4];
  mainloop<T, true>(ld, (red_end - red_begin + T::BK - 1) / T::BK, acc, sA, sB);
  if (gridDim.z > 1)
    store_rows_fp32<T>(acc, parts + int64_t(blockIdx.z) * p.M * p.ncols, p.M, p.ncols, m0, n0, p.ncols % 2 == 0);
  else
    store_nchw_bf16<T>(acc, bias, out, p.M, p.ncols, p.out, m0, n0, sA);
}

template <class T, bool kAsyncA, bool kMask>
static __global__ void __launch_bounds__(T::kThreads, 1)
    conv2d_forward_igemm_bf16_kernel(const __grid_constant__ GatherParams<ForwardDecode> p,
                                     const uint16_t* __restrict__ x,  // (N, C, H, W)
                                     const uint16_t* __restrict__ w,  // (K, C, R, S)
                                     const float* __restrict__ b,     // (K) or null
                                     uint16_t* __restrict__ y,        // (N, K, P, Q)
                                     float* __restrict__ parts) {     // (splits, K, N*P*Q) if split
  gather_gemm<T, kAsyncA, kMask>(p, w, x, b, y, parts);
}

template <class T, bool kAsyncA, bool kMask>
static __global__ void __launch_bounds__(T::kThreads, 1)
    conv2d_backward_data_igemm_bf16_kernel(const __grid_constant__ GatherParams<DataDecode> p,
                                           const uint16_t* __restrict__ wt,  // (C, K, R, S)
                                           const uint16_t* __restrict__ dy,  // (N, K, P, Q)
                                           uint16_t* __restrict__ dx,        // (N, C, H, W)
                                           float* __restrict__ parts) {      // (splits, C, N*H*W) if split
  gather_gemm<T, kAsyncA, kMask>(p, wt, dy, nullptr, dx, parts);
}

template <class T, bool kAsyncA>
static __global__ void __launch_bounds__(T::kThreads, 1)
    conv2d_backward_filter_igemm_bf16_kernel(const __grid_constant__ FilterParams p,
                                             const uint16_t* __restrict__ x,   // (N, C, H, W)
                                             const uint16_t* __restrict__ dy,  // (N, K, P, Q)
                                             float* __restrict__ out) {        // (splits, K, C*R*S)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* sA = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sB = sA + (kAsyncA ? T::STAGES : 2) * T::kAStage;
  const int m0 = int(blockIdx.y) * T::BM, n0 = int(blockIdx.x) * T::BN;
  const int red_begin = int(blockIdx.z) * p.chunk, red_end = min(p.red, red_begin + p.chunk);
  FilterLoader<T, kAsyncA> ld(p, dy, x, m0, n0, red_begin, red_end);
  float acc[T::MI][T::NI][4];
  mainloop<T, false>(ld, (red_end - red_begin + T::BK - 1) / T::BK, acc, sA, sB);
  store_rows_fp32<T>(acc, out + int64_t(blockIdx.z) * p.M * p.ncols, p.M, p.ncols, m0, n0, p.pairs);
}

// out[i] = sum over splits s = 0, 1, ... of parts[s * count + i], in that order.
static __global__ void conv2d_igemm_bf16_sum_splits_kernel(const float* __restrict__ parts,  // (splits, count)
                                                           int splits, int count,
                                                           float* __restrict__ out) {  // (count)
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < count; i += int(gridDim.x * blockDim.x)) {
    float s = 0.0f;
    for (int j = 0; j < splits; ++j) s += parts[int64_t(j) * count + i];
    out[i] = s;
  }
}

// The same sum over a (M, ncols) GEMM output, + bias[m], rounded to bf16 into NCHW planes.
static __global__ void conv2d_igemm_bf16_sum_splits_nchw_kernel(const float* __restrict__ parts,  // (splits, M, ncols)
                                                                int splits, int M, int ncols, Div div_ncols,
                                                                PlaneOut po, const float* __restrict__ bias,  // (M) or null
                                                                uint16_t* __restrict__ out) {  // (N, M, plane)
  const int count = M * ncols;
  for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < count; i += int(gridDim.x * blockDim.x)) {
    float s = 0.0f;
    for (int j = 0; j < splits; ++j) s += parts[int64_t(j) * count + i];
    int m, col, n, pos;
    div_ncols.divmod(i, m, col);
    po.div_plane.divmod(col, n, pos);
    if (bias) s += __ldg(bias + m);
    out[(int64_t(n) * M + m) * po.plane + pos] = bf16_bits_from_float(s);
  }
}

// db partial (group g, channel k) = sum of dy[n, k, p, q] over the group's slice of the n*P*Q
// positions, in a fixed order (thread-strided sums, then the block sum of reduce.cuh).
template <int kThreads>
static __global__ void __launch_bounds__(kThreads)
    conv2d_backward_bias_bf16_kernel(const uint16_t* __restrict__ dy,  // (N, K, P, Q)
                                     int K, Div div_pq, int total, int per_group,
                                     float* __restrict__ out) {  // (groups, K)
  __shared__ float scratch[kThreads / 32];
  const int k = int(blockIdx.x), begin = int(blockIdx.y) * per_group, end = min(total, begin + per_group);
  const int PQ = int(div_pq.d);
  float s = 0.0f;
#pragma unroll 4
  for (int j = begin + int(threadIdx.x); j < end; j += kThreads) {
    int n, pq;
    div_pq.divmod(j, n, pq);
    s += float_from_bf16_bits(__ldg(dy + (n * K + k) * PQ + pq));
  }
  s = cuda::block_sum<kThreads>(s, scratch);
  if (threadIdx.x == 0) out[int64_t(blockIdx.y) * K + k] = s;
}

// wt (C, K, R*S) = w (K, C, R*S): the data gradient's A rows become contiguous.
static __global__ void conv2d_igemm_bf16_transpose_weights_kernel(const uint16_t* __restrict__ w,  // (K, C, RS)
                                                                  int K, int C, Div div_krs, Div div_rs,
                                                                  uint16_t* __restrict__ wt) {  // (C, K, RS)
  const int count = K * C * int(div_rs.d);
  for (int o = int(blockIdx.x * blockDim.x + threadIdx.x); o < count; o += int(gridDim.x * blockDim.x)) {
    int c, krs, k, rs;
    div_krs.divmod(o, c, krs);
    div_rs.divmod(krs, k, rs);
    wt[o] = w[(int64_t(k) * C + c) * div_rs.d + rs];
  }
}

// ---- launch helpers ----

using Tile0 = Tile<128, 128, 2, 4, 4>;
using Tile1 = Tile<128, 64, 2, 2, 4>;
using Tile2 = Tile<64, 128, 2, 2, 4>;
using Tile3 = Tile<64, 64, 2, 2, 4>;

template <class Fn>
static void with_tile(int tile, Fn&& fn) {
  switch (tile) {
    case 0:
      return fn(Tile0{});
    case 1:
      return fn(Tile1{});
    case 2:
      return fn(Tile2{});
    case 3:
      return fn(Tile3{});
    default:
      CNN_THROW("igemm bf16: tile index {} outside [0, {})", tile, kIgemmBf16Tiles);
  }
}

struct Call {
  cudaStream_t stream;
  IgemmBf16Plan plan;
  int splits;
  int64_t chunk;
  IgemmBf16Gemm g;
  IgemmBf16WorkspaceLayout layout;
  unsigned char* ws;
};

static Call prepare(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const IgemmBf16Plan* plan, bool db,
                    const char* what) {
  Call c{};
  c.stream = cuda::stream_of(ctx, what);
  if (!conv2d_igemm_bf16_can_implement(sh))
    CNN_THROW("{}: cannot implement {} (needs groups == 1 and every tensor under 2^31 elements)", what,
              sh.to_string());
  c.plan = plan ? *plan : conv2d_igemm_bf16_choose_plan(sh, dir, multiprocessors(), ctx.workspace_limit_bytes);
  conv2d_igemm_bf16_tile_info(c.plan.tile);  // throws for a bad index
  CNN_CHECK(c.plan.splits >= 1, "{}: plan splits must be >= 1, got {}", what, c.plan.splits);
  c.g = conv2d_igemm_bf16_gemm(sh, dir);
  c.splits = conv2d_igemm_bf16_effective_splits(sh, dir, c.plan);
  c.chunk = igemm_bf16_split_chunk(c.g.red, c.splits);
  c.layout = igemm_bf16_workspace_layout(sh, dir, c.splits, db);
  c.ws = c.layout.total ? static_cast<unsigned char*>(cuda::workspace_bytes(ctx, c.layout.total, what)) : nullptr;
  return c;
}

template <class T>
static dim3 gemm_grid(const Call& c) {
  return dim3(unsigned((c.g.n + T::BN - 1) / T::BN), unsigned((c.g.m + T::BM - 1) / T::BM), unsigned(c.splits));
}

// Forward or data gradient with tile T: kernel(a_async, mask) picks the instantiation for the
// weights' load path and the window masks (R*S <= 32).
template <class T, class Kernel, class... Args>
static void launch_gather(const char* what, const Call& c, bool vec_a, const Conv2dShape& sh, Kernel kernel,
                          Args... args) {
  auto go = [&](auto a, auto m) {
    launch(what, kernel(a, m), gemm_grid<T>(c), T::kThreads, T::smem_bytes(decltype(a)::value, true), c.stream,
           args...);
  };
  const bool mask = sh.R * sh.S <= kMaxMaskTaps;
  if (vec_a)
    mask ? go(std::true_type{}, std::true_type{}) : go(std::true_type{}, std::false_type{});
  else
    mask ? go(std::false_type{}, std::true_type{}) : go(std::false_type{}, std::false_type{});
}

static void sum_splits_nchw(const Call& c, const PlaneOut& po, const float* bias, uint16_t* out, const char* what) {
  const int count = int(c.g.m * c.g.n);
  conv2d_igemm_bf16_sum_splits_nchw_kernel<<<cuda::grid_blocks(count, 256), 256, 0, c.stream>>>(
      reinterpret_cast<const float*>(c.ws + c.layout.partial), c.splits, int(c.g.m), int(c.g.n),
      Div(c.g.n), po, bias, out);
  CUDA_CHECK_LAUNCH(what);
}

// ---- entry points ----

void conv2d_forward_igemm_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x, const bf16* w,
                                    const float* b, bf16* y, const IgemmBf16Plan* plan) {
  const char* what = "conv2d forward igemm bf16";
  const Call c = prepare(ctx, sh, ConvDir::forward, plan, false, what);
  const ForwardDecode dec = ForwardDecode::make(sh);
  const PlaneOut po{Div(sh.P * sh.Q), int(sh.P * sh.Q), (sh.P * sh.Q) % 8 == 0 && cuda::aligned16(y)};
  const GatherParams<ForwardDecode> p{int(c.g.m), int(c.g.n), int(c.g.red), int(c.chunk), int(c.g.red), po, dec};
  const bool vec_a = c.g.red % 8 == 0 && cuda::aligned16(w);
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  const auto* ws = reinterpret_cast<const uint16_t*>(w);
  auto* ys = reinterpret_cast<uint16_t*>(y);
  float* parts = c.splits > 1 ? reinterpret_cast<float*>(c.ws + c.layout.partial) : nullptr;
  with_tile(c.plan.tile, [&](auto t) {
    using T = decltype(t);
    launch_gather<T>(what, c, vec_a, sh, [](auto a, auto m) {
      return conv2d_forward_igemm_bf16_kernel<T, decltype(a)::value, decltype(m)::value>;
    }, p, xs, ws, b, ys, parts);
  });
  if (c.splits > 1) sum_splits_nchw(c, po, b, ys, what);
}

void conv2d_backward_data_igemm_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* w,
                                          const bf16* dy, bf16* dx, const IgemmBf16Plan* plan) {
  const char* what = "conv2d backward data igemm bf16";
  const Call c = prepare(ctx, sh, ConvDir::backward_data, plan, false, what);
  auto* wt = reinterpret_cast<uint16_t*>(c.ws + c.layout.wt);
  const int RS = int(sh.R * sh.S);
  conv2d_igemm_bf16_transpose_weights_kernel<<<cuda::grid_blocks(sh.K * sh.C * RS, 256), 256, 0, c.stream>>>(
      reinterpret_cast<const uint16_t*>(w), int(sh.K), int(sh.C), Div(sh.K * RS), Div(RS), wt);
  CUDA_CHECK_LAUNCH(what);
  const PlaneOut po{Div(sh.H * sh.W), int(sh.H * sh.W), (sh.H * sh.W) % 8 == 0 && cuda::aligned16(dx)};
  const bool vec_a = c.g.red % 8 == 0;  // wt is 256-byte aligned in the workspace
  const auto* dys = reinterpret_cast<const uint16_t*>(dy);
  auto* dxs = reinterpret_cast<uint16_t*>(dx);
  float* parts = c.splits > 1 ? reinterpret_cast<float*>(c.ws + c.layout.partial) : nullptr;
  const GatherParams<DataDecode> p{int(c.g.m), int(c.g.n), int(c.g.red), int(c.chunk), int(c.g.red), po,
                                   DataDecode::make(sh)};
  with_tile(c.plan.tile, [&](auto t) {
    using T = decltype(t);
    launch_gather<T>(what, c, vec_a, sh, [](auto a, auto m) {
      return conv2d_backward_data_igemm_bf16_kernel<T, decltype(a)::value, decltype(m)::value>;
    }, p, wt, dys, dxs, parts);
  });
  if (c.splits > 1) sum_splits_nchw(c, po, nullptr, dxs, what);
}

void conv2d_backward_filter_igemm_bf16_cuda(const ExecContext& ctx, const Conv2dShape& sh, const bf16* x,
                                            const bf16* dy, float* dw, float* db, const IgemmBf16Plan* plan) {
  const char* what = "conv2d backward filter igemm bf16";
  const Call c = prepare(ctx, sh, ConvDir::backward_filter, plan, db != nullptr, what);
  const auto* xs = reinterpret_cast<const uint16_t*>(x);
  const auto* dys = reinterpret_cast<const uint16_t*>(dy);
  if (dw) {
    float* out = c.splits > 1 ? reinterpret_cast<float*>(c.ws + c.layout.partial) : dw;
    const FilterParams p{int(c.g.m), int(c.g.n), int(c.g.red), int(c.chunk), FilterDecode::make(sh),
                         c.g.n % 2 == 0 && (reinterpret_cast<uintptr_t>(out) & 7) == 0};
    const bool vec_a = (sh.P * sh.Q) % 8 == 0 && cuda::aligned16(dy);
    with_tile(c.plan.tile, [&](auto t) {
      using T = decltype(t);
      if (vec_a)
        launch(what, conv2d_backward_filter_igemm_bf16_kernel<T, true>, gemm_grid<T>(c), T::kThreads,
               T::smem_bytes(true, false), c.stream, p, xs, dys, out);
      else
        launch(what, conv2d_backward_filter_igemm_bf16_kernel<T, false>, gemm_grid<T>(c), T::kThreads,
               T::smem_bytes(false, false), c.stream, p, xs, dys, out);
    });
    if (c.splits > 1) {
      const int count = int(c.g.m * c.g.n);
      conv2d_igemm_bf16_sum_splits_kernel<<<cuda::grid_blocks(count, 256), 256, 0, c.stream>>>(out, c.splits, count,
                                                                                              dw);
      CUDA_CHECK_LAUNCH(what);
    }
  }
  if (db) {
    const int groups = igemm_bf16_db_groups(sh), total = int(sh.N * sh.P * sh.Q);
    float* out = groups > 1 ? reinterpret_cast<float*>(c.ws + c.layout.db_partial) : db;
    conv2d_backward_bias_bf16_kernel<256><<<dim3(unsigned(sh.K), unsigned(groups)), 256, 0, c.stream>>>(
        dys, int(sh.K), Div(sh.P * sh.Q), total, (total + groups - 1) / groups, out);
    CUDA_CHECK_LAUNCH(what);
    if (groups > 1) {
      conv2d_igemm_bf16_sum_splits_kernel<<<1, 256, 0, c.stream>>>(out, groups, int(sh.K), db);
      CUDA_CHECK_LAUNCH(what);
    }
  }
}

}  // namespace cnn
