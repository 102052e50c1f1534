// Dense on CUDA: cuBLAS SGEMM on the context's handle and stream, a bias broadcast the GEMM
// accumulates onto, and a deterministic column sum for db. The GEMMs run in the call's math:
// pedantic FP32 for MathMode::fp32, TF32 tensor cores (FP32 accumulation) for tf32; the handle's
// math mode is set for the call and put back after it (BlasMath), so the handle's other users (the
// im2col convolution strategy) keep plain FP32. Setting it is host-side handle state read when a
// GEMM is enqueued, so it is also right under CUDA graph capture.
// The bf16 rows (dense.h) run cublasGemmEx on BF16 tensor cores (CUBLAS_DEFAULT_MATH for the
// call, CUBLAS_COMPUTE_32F) on a bf16 copy of w: the prepacked one the call gives (w16), else one
// cast into ctx.workspace; forward's bias add and
// rounding of y is one kernel over cuBLAS's FP32 output, so y is rounded once, after the bias.
// The f16 rows are the same code with T = f16: CUDA_R_16F operands, FP32 compute and accumulation
// (CUBLAS_COMPUTE_32F), FP32 dw, an f16 copy of w (past 65504 it is inf: core/fp16.h).
// Trap: cuBLAS is column-major; a row-major (R, C) matrix is the column-major (C, R) matrix, its
// transpose. So y (N, K) = x w^T is computed as y^T (K, N) = w (K, C) x^T (C, N), i.e.
// gemm(T, N) on w (col-major C x K, ld C) and x (col-major C x N, ld C) into y (col-major K x N, ld K).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/cast_bf16.h"
#include "ops/column_sum_bf16.h"
#include "ops/dense.h"
#include "ops/packed_weights.h"
#include "ops/half16.cuh"
#include "ops/reduce.cuh"

namespace cnn {

// y[n, k] = b[k]: the GEMM then adds x w^T with beta = 1.
static __global__ void __launch_bounds__(256)
    dense_forward_bias_fill_kernel(int64_t count, int K,
                                   const float* __restrict__ b,  // (K)
                                   float* __restrict__ y) {      // (N, K)
  for (int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x; i < count; i += int64_t(gridDim.x) * 256)
    y[i] = __ldg(b + i % K);
}

// db[k] = sum over n of dy[n, k]: 32 columns a block, 8 row slices each summed in row order, the
// slices then added in slice order (deterministic, coalesced across k).
static __global__ void __launch_bounds__(256)
    dense_backward_bias_colsum_kernel(int N, int K,
                                      const float* __restrict__ dy,  // (N, K)
                                      float* __restrict__ db) {      // (K)
  __shared__ float part[8][33];
  const int col = int(threadIdx.x) % 32, slice = int(threadIdx.x) / 32;
  const int k = blockIdx.x * 32 + col;
  float acc = 0.0f;
  if (k < K)
    for (int n = slice; n < N; n += 8) acc += __ldg(dy + int64_t(n) * K + k);
  part[slice][col] = acc;
  __syncthreads();
  if (slice == 0 && k < K) {
    float total = 0.0f;
#pragma unroll
    for (int s = 0; s < 8; ++s) total += part[s][col];
    db[k] = total;
  }
}

// y[n, k] = E(acc[n, k] + b[k]) (b null: no bias; E bf16 or f16): the one rounding of the forward.
template <class E>
static __global__ void __launch_bounds__(256)
    dense_forward_bias_round_kernel(int64_t count, int K,
                                    const float* __restrict__ acc,  // (N, K) x w^T in FP32
                                    const float* __restrict__ b,    // (K) or null
                                    uint16_t* __restrict__ y) {     // (N, K) E bits
  for (int64_t i = int64_t(blockIdx.x) * 256 + threadIdx.x; i < count; i += int64_t(gridDim.x) * 256)
    y[i] = Half16<E>::from_float(b ? acc[i] + __ldg(b + i % K) : acc[i]);
}

static void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    CNN_THROW("dense cuda: {} failed: {} ({})", what, cublasGetStatusName(status), cublasGetStatusString(status));
}

static void check_shape(const DenseShape& sh) {
  CNN_CHECK(sh.N >= 1 && sh.C >= 1 && sh.K >= 1, "dense: sizes must be positive, got N={}, C={}, K={}", sh.N, sh.C,
            sh.K);
  CNN_CHECK(sh.N <= INT_MAX && sh.C <= INT_MAX && sh.K <= INT_MAX, "dense cuda: N={}, C={}, K={} exceed cuBLAS int sizes",
            sh.N, sh.C, sh.K);
}

// The handle's math mode for one call's GEMMs (see the top); restores the previous mode on exit.
class BlasMath {
 public:
  BlasMath(cublasHandle_t h, MathMode m)
      : BlasMath(h, m == MathMode::tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH) {}
  BlasMath(cublasHandle_t h, cublasMath_t want) : m_h(h) {
    check_cublas(cublasGetMathMode(h, &m_prev), "cublasGetMathMode");
    if (want != m_prev) {
      check_cublas(cublasSetMathMode(h, want), "cublasSetMathMode");
      m_set = true;
    }
  }
  ~BlasMath() {
    if (m_set) cublasSetMathMode(m_h, m_prev);  // destructors never throw
  }
  BlasMath(const BlasMath&) = delete;
  BlasMath& operator=(const BlasMath&) = delete;

 private:
  cublasHandle_t m_h;
  cublasMath_t m_prev = CUBLAS_DEFAULT_MATH;
  bool m_set = false;
};

static cublasHandle_t blas_handle(const ExecContext& ctx) {
  CNN_CHECK(ctx.cublas_handle, "dense cuda: the context has no cuBLAS handle");
  return static_cast<cublasHandle_t>(ctx.cublas_handle);
}

// Binds the handle to the stream only when it is not already: cublasSetStream also drops the
// workspace given with cublasSetWorkspace, and without it cuBLAS may allocate inside a CUDA graph capture.
static void bind_stream(cublasHandle_t h, cudaStream_t stream) {
  cudaStream_t bound = nullptr;
  check_cublas(cublasGetStream(h, &bound), "cublasGetStream");
  if (bound != stream) check_cublas(cublasSetStream(h, stream), "cublasSetStream");
}

void dense_forward_cuda(const DenseForward& a) {
  const ExecContext& ctx = *a.ctx;
  const DenseShape& sh = a.sh;
  const float *x = a.x.f32(), *w = a.w.f32(), *b = a.b.f32();
  float* y = a.y.f32();
  check_shape(sh);
  CNN_CHECK(!sh.has_bias || b, "dense: the shape has a bias but b is null");
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  const cublasHandle_t h = blas_handle(ctx);
  bind_stream(h, stream);
  const int N = int(sh.N), C = int(sh.C), K = int(sh.K);
  float beta = 0.0f;
  if (sh.has_bias) {
    const int64_t count = sh.N * sh.K;
    const unsigned blocks = unsigned(std::min<int64_t>((count + 255) / 256, 4096));
    dense_forward_bias_fill_kernel<<<blocks, 256, 0, stream>>>(count, K, b, y);
    CUDA_CHECK_LAUNCH("dense_forward_bias_fill_kernel");
    beta = 1.0f;
  }
  const float alpha = 1.0f;
  const BlasMath math(h, a.math);
  // y^T (K, N) = w (K, C) * x^T (C, N)
  check_cublas(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, K, N, C, &alpha, w, C, x, C, &beta, y, K),
               "cublasSgemm (dense forward)");
}

void dense_backward_cuda(const DenseBackward& a) {
  const ExecContext& ctx = *a.ctx;
  const DenseShape& sh = a.sh;
  const float *x = a.x.f32(), *w = a.w.f32(), *dy = a.dy.f32();
  float *dx = a.dx.f32(), *dw = a.dw.f32(), *db = a.db.f32();
  check_shape(sh);
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  const int N = int(sh.N), C = int(sh.C), K = int(sh.K);
  const float alpha = 1.0f, beta = 0.0f;
  if (dx || dw) {
    const cublasHandle_t h = blas_handle(ctx);
    bind_stream(h, stream);
    const BlasMath math(h, a.math);
    // dx (N, C) = dy (N, K) w (K, C):  dx^T (C, N) = w^T (C, K) * dy^T (K, N)
    if (dx)
      check_cublas(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, C, N, K, &alpha, w, C, dy, K, &beta, dx, C),
                   "cublasSgemm (dense dx)");
    // dw (K, C) = dy^T (K, N) x (N, C):  dw^T (C, K) = x^T (C, N) * dy (N, K)
    if (dw)
      check_cublas(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, C, K, N, &alpha, x, C, dy, K, &beta, dw, C),
                   "cublasSgemm (dense dw)");
  }
  if (db) {
    dense_backward_bias_colsum_kernel<<<unsigned((K + 31) / 32), 256, 0, stream>>>(N, K, dy, db);
    CUDA_CHECK_LAUNCH("dense_backward_bias_colsum_kernel");
  }
}

// The bf16 (f16) row's scratch in ctx.workspace (dense_bf16_workspace_bytes): the T copy of w, then
// forward's FP32 y or backward's column-sum partials.
namespace {
template <typename T>
struct Scratch16 {
  T* w16 = nullptr;  // (K, C)
  float* rest = nullptr;
};
// cuBLAS's name of T, and the cast of the FP32 master weights into T.
constexpr cudaDataType_t cublas_type(const bf16*) { return CUDA_R_16BF; }
constexpr cudaDataType_t cublas_type(const f16*) { return CUDA_R_16F; }
void cast_weights(const ExecContext& ctx, int64_t n, const float* w, bf16* out) {
  cast_float_to_bf16_cuda(ctx, n, w, out);
}
void cast_weights(const ExecContext& ctx, int64_t n, const float* w, f16* out) {
  cast_float_to_f16_cuda(ctx, n, w, out);
}
}  // namespace
// The T copy of w (K, C): the prepacked one the call gives, else cast into the scratch's.
template <typename T>
static const T* weights16(const ExecContext& ctx, const DenseShape& sh, const float* w, const PackedWeights16& given,
                          T* own, const char* what) {
  if (const void* p = packed_weights_for(given, DTypeOf<T>::value, Bf16WeightLayout::kcrs, what))
    return static_cast<const T*>(p);
  cast_weights(ctx, sh.K * sh.C, w, own);
  return own;
}

template <typename T>
static Scratch16<T> scratch16(const ExecContext& ctx, const DenseShape& sh, const char* what) {
  static_assert(sizeof(T) == sizeof(bf16), "dense_bf16_workspace_bytes counts 2-byte weights");
  char* base = static_cast<char*>(cuda::workspace_bytes(ctx, dense_bf16_workspace_bytes(sh), what));
  return {reinterpret_cast<T*>(base), reinterpret_cast<float*>(base + dense_bf16_weights_bytes(sh))};
}

template <typename T>
static void forward_16(const DenseForward& a, const char* what) {
  const ExecContext& ctx = *a.ctx;
  const DenseShape& sh = a.sh;
  const T* x = half16_data<T>(a.x);
  const float *w = a.w.f32(), *b = a.b.f32();
  T* y = half16_data<T>(a.y);
  constexpr cudaDataType_t kType = cublas_type(static_cast<const T*>(nullptr));
  check_shape(sh);
  CNN_CHECK(!sh.has_bias || b, "dense: the shape has a bias but b is null");
  const cudaStream_t stream = cuda::stream_of(ctx, what);
  const cublasHandle_t h = blas_handle(ctx);
  bind_stream(h, stream);
  const Scratch16<T> ws = scratch16<T>(ctx, sh, what);
  const T* w16 = weights16<T>(ctx, sh, w, a.w16, ws.w16, what);
  const int N = int(sh.N), C = int(sh.C), K = int(sh.K);
  const float alpha = 1.0f, beta = 0.0f;
  {
    const BlasMath math(h, CUBLAS_DEFAULT_MATH);  // 16-bit tensor cores; CUBLAS_COMPUTE_32F keeps FP32 sums
    // y^T (K, N) = w (K, C) * x^T (C, N), in FP32 into the scratch
    check_cublas(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, K, N, C, &alpha, w16, kType, C, x, kType, C, &beta,
                              ws.rest, CUDA_R_32F, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (dense forward, 16-bit)");
  }
  const int64_t count = sh.N * sh.K;
  dense_forward_bias_round_kernel<T><<<cuda::grid_blocks(count, 256), 256, 0, stream>>>(
      count, K, ws.rest, sh.has_bias ? b : nullptr, reinterpret_cast<uint16_t*>(y));
  CUDA_CHECK_LAUNCH(what);
}

template <typename T>
static void backward_16(const DenseBackward& a, const char* what) {
  const ExecContext& ctx = *a.ctx;
  const DenseShape& sh = a.sh;
  const T *x = half16_data<T>(a.x), *dy = half16_data<T>(a.dy);
  const float* w = a.w.f32();
  T* dx = half16_data<T>(a.dx);
  constexpr cudaDataType_t kType = cublas_type(static_cast<const T*>(nullptr));
  float *dw = a.dw.f32(), *db = a.db.f32();
  check_shape(sh);
  CNN_CHECK(!dx || w, "{}: dx needs w", what);
  CNN_CHECK(!dw || x, "{}: dw needs x", what);
  if (!dx && !dw && !db) return;
  const cudaStream_t stream = cuda::stream_of(ctx, what);
  const Scratch16<T> ws = scratch16<T>(ctx, sh, what);
  const int N = int(sh.N), C = int(sh.C), K = int(sh.K);
  const float alpha = 1.0f, beta = 0.0f;
  if (dx || dw) {
    const cublasHandle_t h = blas_handle(ctx);
    bind_stream(h, stream);
    const BlasMath math(h, CUBLAS_DEFAULT_MATH);
    // dx^T (C, N) = w^T (C, K) * dy^T (K, N), rounded once to T by cuBLAS
    if (dx) {
      const T* w16 = weights16<T>(ctx, sh, w, a.w16, ws.w16, what);
      check_cublas(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, C, N, K, &alpha, w16, kType, C, dy, kType, K, &beta, dx,
                                kType, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (dense dx, 16-bit)");
    }
    // dw^T (C, K) = x^T (C, N) * dy (N, K), an FP32 output matrix
    if (dw)
      check_cublas(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, C, K, N, &alpha, x, kType, C, dy, kType, K, &beta, dw,
                                CUDA_R_32F, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (dense dw, 16-bit)");
  }
  if (db) column_sum_cuda(ctx, sh.N, sh.K, dy, db, ws.rest);
}

void dense_forward_cuda_bf16(const DenseForward& a) { forward_16<bf16>(a, "dense forward cuda bf16"); }
void dense_forward_cuda_f16(const DenseForward& a) { forward_16<f16>(a, "dense forward cuda f16"); }
void dense_backward_cuda_bf16(const DenseBackward& a) { backward_16<bf16>(a, "dense backward cuda bf16"); }
void dense_backward_cuda_f16(const DenseBackward& a) { backward_16<f16>(a, "dense backward cuda f16"); }

}  // namespace cnn
