// im2col + GEMM convolution on CUDA, the Caffe way (Jia et al. 2014): the columns of a chunk of
// images are written to the workspace, then cuBLAS SGEMM (pedantic FP32) multiplies them by each
// group's filters. backward_data multiplies into columns and gathers them back (col2im as a gather
// per input pixel, so no atomics and the same bits every run); backward_filter accumulates one GEMM
// per image with beta = 1 after the first. Any stride, padding, dilation and groups.
// Trap: the columns are (nb, C*R*S, P*Q) with group g at rows [g*Cg*R*S, (g+1)*Cg*R*S): per image
// the groups are evenly strided, per group the images are, and both batchings below rely on it.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/error.h"
#include "ops/conv2d_strategies.cuh"
#include "ops/conv2d_strategies.h"
#include "ops/reduce.cuh"

namespace cnn {

using namespace conv2d_strategy_detail;

struct Im2colDims {
  int C, H, W, R, S, P, Q;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
};

static Im2colDims dims_of(const Conv2dShape& sh) {
  return {int(sh.C),   int(sh.H),   int(sh.W), int(sh.R), int(sh.S),     int(sh.P),    int(sh.Q),
          sh.stride_h, sh.stride_w, sh.pad_h,  sh.pad_w,  sh.dilation_h, sh.dilation_w};
}

constexpr int kThreads = 256;
constexpr int kMaxGridY = 65535;

// cols row (n, c, r, s), column (p, q) = x[n][c][p*stride_h - pad_h + r*dil_h][q*stride_w - pad_w + s*dil_w]
// or 0 outside the image. Rows over blockIdx.y (grid-stride), columns over x: lanes write
// consecutive columns (coalesced), and a row's divisions are done once.
static __global__ void conv2d_forward_im2col_kernel(const Im2colDims d, int64_t rows,
                                                    const float* __restrict__ x,  // (nb, C, H, W)
                                                    float* __restrict__ cols) {   // (nb, C*R*S, P*Q)
  const int PQ = d.P * d.Q, RS = d.R * d.S;
  const int pq = blockIdx.x * blockDim.x + threadIdx.x;
  if (pq >= PQ) return;
  const int p = pq / d.Q, q = pq - p * d.Q;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const int64_t plane = row / RS;  // n * C + c
    const int rs = int(row - plane * RS), r = rs / d.S, s = rs - r * d.S;
    const int h = p * d.stride_h - d.pad_h + r * d.dil_h, w = q * d.stride_w - d.pad_w + s * d.dil_w;
    const bool inside = h >= 0 && h < d.H && w >= 0 && w < d.W;
    cols[row * PQ + pq] = inside ? x[(plane * d.H + h) * d.W + w] : 0.0f;
  }
}

// dx[n][c][h][w] = sum of the column entries that im2col copied from it: taps (r, s) with
// h + pad_h - r*dil_h = p*stride_h for some 0 <= p < P (and likewise for w). A gather, in a fixed
// tap order, so the result is deterministic.
static __global__ void conv2d_backward_data_col2im_kernel(const Im2colDims d, int64_t total,
                                                          const float* __restrict__ cols,  // (nb, C*R*S, P*Q)
                                                          float* __restrict__ dx) {        // (nb, C, H, W)
  const int64_t PQ = int64_t(d.P) * d.Q, RS = int64_t(d.R) * d.S;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t plane = i / (int64_t(d.H) * d.W);  // n * C + c
    const int hw = int(i - plane * d.H * d.W), h = hw / d.W, w = hw - h * d.W;
    const float* src = cols + plane * RS * PQ;
    float acc = 0.0f;
    for (int r = 0; r < d.R; ++r) {
      const int hp = h + d.pad_h - r * d.dil_h;
      if (hp < 0 || hp % d.stride_h != 0 || hp / d.stride_h >= d.P) continue;
      const int p = hp / d.stride_h;
      for (int s = 0; s < d.S; ++s) {
        const int wq = w + d.pad_w - s * d.dil_w;
        if (wq < 0 || wq % d.stride_w != 0 || wq / d.stride_w >= d.Q) continue;
        acc += src[(int64_t(r) * d.S + s) * PQ + int64_t(p) * d.Q + wq / d.stride_w];
      }
    }
    dx[i] = acc;
  }
}

static void im2col(const Im2colDims& d, int nb, const float* x, float* cols, cudaStream_t stream) {
  const int64_t rows = int64_t(nb) * d.C * d.R * d.S, PQ = int64_t(d.P) * d.Q;
  const dim3 grid(static_cast<unsigned>((PQ + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(rows, kMaxGridY)));
  conv2d_forward_im2col_kernel<<<grid, kThreads, 0, stream>>>(d, rows, x, cols);
  CUDA_CHECK_LAUNCH("conv2d_forward_im2col_kernel");
}

static int64_t cols_per_image(const Conv2dShape& sh) { return sh.C * sh.R * sh.S * sh.P * sh.Q; }

// What every direction sets up: stream, cuBLAS handle, dims, the cols chunk (nb images of `per`
// floats each) in the workspace, and the per-group GEMM sizes.
struct GemmSetup {
  cudaStream_t stream;
  cublasHandle_t blas;
  Im2colDims d;
  int64_t per, nb;
  float* cols;
  int G, Kg, CgRS, PQ;
};
static GemmSetup gemm_setup(const ExecContext& ctx, const Conv2dShape& sh) {
  const int64_t per = cols_per_image(sh), nb = chunk_images(sh.N, size_t(per));
  const int G = sh.groups;
  return GemmSetup{static_cast<cudaStream_t>(ctx.cuda_stream),
                   blas_on_stream(ctx),
                   dims_of(sh),
                   per,
                   nb,
                   workspace_floats(ctx, size_t(nb * per), "im2col_gemm"),
                   G,
                   int(sh.K / G),
                   int(sh.C / G * sh.R * sh.S),
                   int(sh.P * sh.Q)};
}

static void forward(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* w, const float* b,
                    float* y) {
  const auto [stream, blas, d, per, nb, cols, G, Kg, CgRS, PQ] = gemm_setup(ctx, sh);
  const float one = 1.0f, zero = 0.0f;
  for (int64_t n0 = 0; n0 < sh.N; n0 += nb) {
    const int cnt = int(std::min<int64_t>(nb, sh.N - n0));
    im2col(d, cnt, x + n0 * sh.C * sh.H * sh.W, cols, stream);
    // Per group, batched over the chunk: row-major y_n,g (Kg, PQ) = w_g (Kg, CgRS) cols_n,g (CgRS, PQ);
    // column-major y^T = cols^T w^T. The filters are shared (stride 0).
    for (int g = 0; g < G; ++g)
      check_cublas(cublasSgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_N, PQ, Kg, CgRS, &one,
                                             cols + int64_t(g) * CgRS * PQ, PQ, per, w + int64_t(g) * Kg * CgRS, CgRS,
                                             0, &zero, y + (n0 * sh.K + int64_t(g) * Kg) * PQ, PQ, sh.K * PQ, cnt),
                   "cublasSgemmStridedBatched (im2col forward)");
  }
  if (b) add_bias(y, b, sh.N, sh.K, PQ, stream);
}

static void backward_data(const ExecContext& ctx, const Conv2dShape& sh, const float* w, const float* dy, float* dx) {
  const auto [stream, blas, d, per, nb, cols, G, Kg, CgRS, PQ] = gemm_setup(ctx, sh);
  const float one = 1.0f, zero = 0.0f;
  for (int64_t n0 = 0; n0 < sh.N; n0 += nb) {
    const int cnt = int(std::min<int64_t>(nb, sh.N - n0));
    // Row-major cols_n,g (CgRS, PQ) = w_g^T (CgRS, Kg) dy_n,g (Kg, PQ); column-major cols^T = dy^T w.
    for (int g = 0; g < G; ++g)
      check_cublas(
          cublasSgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_T, PQ, CgRS, Kg, &one,
                                    dy + (n0 * sh.K + int64_t(g) * Kg) * PQ, PQ, sh.K * PQ, w + int64_t(g) * Kg * CgRS,
                                    CgRS, 0, &zero, cols + int64_t(g) * CgRS * PQ, PQ, per, cnt),
          "cublasSgemmStridedBatched (im2col backward_data)");
    const int64_t total = int64_t(cnt) * sh.C * sh.H * sh.W;
    conv2d_backward_data_col2im_kernel<<<cuda::grid_blocks(total, kThreads), kThreads, 0, stream>>>(
        d, total, cols, dx + n0 * sh.C * sh.H * sh.W);
    CUDA_CHECK_LAUNCH("conv2d_backward_data_col2im_kernel");
  }
}

static void backward_filter(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* dy, float* dw,
                            float* db) {
  const auto [stream, blas, d, per, nb, cols, G, Kg, CgRS, PQ] = gemm_setup(ctx, sh);
  const float one = 1.0f;
  for (int64_t n0 = 0; n0 < sh.N; n0 += nb) {
    const int cnt = int(std::min<int64_t>(nb, sh.N - n0));
    im2col(d, cnt, x + n0 * sh.C * sh.H * sh.W, cols, stream);
    // Per image, batched over groups: row-major dw_g (Kg, CgRS) += dy_n,g (Kg, PQ) cols_n,g^T (PQ, CgRS);
    // column-major dw^T (CgRS, Kg) = cols^T(cm) dy(cm). Images are added in order: deterministic.
    for (int i = 0; i < cnt; ++i) {
      const float beta = (n0 == 0 && i == 0) ? 0.0f : 1.0f;
      check_cublas(cublasSgemmStridedBatched(blas, CUBLAS_OP_T, CUBLAS_OP_N, CgRS, Kg, PQ, &one, cols + i * per, PQ,
                                             int64_t(CgRS) * PQ, dy + (n0 + i) * sh.K * PQ, PQ, int64_t(Kg) * PQ, &beta,
                                             dw, CgRS, int64_t(Kg) * CgRS, G),
                   "cublasSgemmStridedBatched (im2col backward_filter)");
    }
  }
  if (db) bias_grad(dy, db, sh.N, sh.K, PQ, stream);
}

bool conv2d_cuda_im2col_gemm_can_implement(const Conv2dShape& sh, ConvDir dir) {
  return conv2d_im2col_gemm_shape_supported(sh, dir);
}

size_t conv2d_cuda_im2col_gemm_workspace_bytes(const Conv2dShape& sh, ConvDir dir) {
  if (!conv2d_im2col_gemm_shape_supported(sh, dir)) return 0;
  const int64_t per = cols_per_image(sh);
  return size_t(chunk_images(sh.N, size_t(per)) * per) * sizeof(float);
}

void conv2d_cuda_im2col_gemm_run(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const ConvOperandsF32& op) {
  CNN_CHECK(conv2d_im2col_gemm_shape_supported(sh, dir), "conv2d im2col_gemm cannot implement {} for {}",
            to_string(dir), sh.to_string());
  switch (dir) {
    case ConvDir::forward:
      CNN_CHECK(op.x && op.w && op.y, "conv2d im2col_gemm forward: x, w and y must not be null");
      forward(ctx, sh, op.x, op.w, sh.has_bias ? op.b : nullptr, op.y);
      break;
    case ConvDir::backward_data:
      CNN_CHECK(op.w && op.dy && op.dx, "conv2d im2col_gemm backward_data: w, dy and dx must not be null");
      backward_data(ctx, sh, op.w, op.dy, op.dx);
      break;
    case ConvDir::backward_filter:
      CNN_CHECK(op.x && op.dy && op.dw, "conv2d im2col_gemm backward_filter: x, dy and dw must not be null");
      backward_filter(ctx, sh, op.x, op.dy, op.dw, op.db);
      break;
  }
}

}  // namespace cnn
