// Winograd F(2x2, 3x3) convolution on CUDA (Lavin & Gray, "Fast Algorithms for Convolutional Neural
// Networks", CVPR 2016): U = G g G^T per filter, V = B^T d B per overlapping 4x4 input tile, 16
// independent GEMMs M(e) = U(e) V(e) through cuBLAS (pedantic FP32), then Y = A^T m A per 2x2 tile.
// backward_data is the same forward on the 180-degree-rotated, channel-transposed filter with
// padding 2 - pad; backward_filter uses dU(e) = sum_t (A dY A^T)(e) V(e)^T and dW = G^T dU G.
// backward_filter splits each chunk's T-long reduction into S pieces: its 16 products are only K x C
// (a block or a few each) but T = 10^4-10^5 tiles long, so 16 problems left most SMs idle (VGG's
// conv2_1 took over twice conv3_1's time for the same FLOPs); 16 S problems write S partial dU,
// summed in a fixed order (deterministic) by the final filter transform.
// Trap: the three transforms index tiles by (image, tile row, tile col) of the CHUNK; tiles past the
// output edge are computed and dropped (forward) or fed a zero dY (backward_filter); split slots
// past T hold zeros in both V and Yt, so nothing stale reaches a product.
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

// One forward pass over a chunk: nb images (Cin, Hin, Win) -> (Kout, Pout, Qout), 3x3, stride 1.
// V and Yt hold the chunk's tiles in S splits of Tc slots, (16, S, Cin or Kout, Tc): tile t in split
// t / Tc, slot t % Tc. The forward pass and backward_data use S = 1, Tc = T: (16, Cin, T).
struct WinogradDims {
  int nb, Cin, Hin, Win, Kout, Pout, Qout, pad_h, pad_w;
  int TP, TQ, T;  // tiles per column, per row, in the chunk (nb * TP * TQ)
  int S, Tc;      // splits and slots a split (S * Tc >= T)
};

// Row (channel) and chunk tile t of flat index i over (S, rows, Tc), rows = Cin or Kout.
__device__ __forceinline__ void slot_of(const WinogradDims& d, int i, int rows, int& row, int& t) {
  const int q = i / d.Tc, j = i - q * d.Tc;
  const int s = d.S == 1 ? 0 : q / rows;
  row = q - s * rows;
  t = s * d.Tc + j;
}

// Tile t of the chunk: image n, tile row tp, tile column tq.
__device__ __forceinline__ void tile_of(const WinogradDims& d, int t, int& n, int& tp, int& tq) {
  n = t / (d.TP * d.TQ);
  const int rem = t - n * d.TP * d.TQ;
  tp = rem / d.TQ;
  tq = rem - tp * d.TQ;
}

// U (16, Kout, Cin) = G g G^T; g is w[ko][ci] (w: (Kout, Cin, 3, 3)) or, when flip, the rotated
// w[ci][ko] (w: (Cin, Kout, 3, 3)), the filter of the data gradient.
static __global__ void conv2d_forward_winograd_filter_kernel(const float* __restrict__ w,
                                                             float* __restrict__ U,  // (16, Kout, Cin)
                                                             int Kout, int Cin, bool flip) {
  const int total = Kout * Cin;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int ko = i / Cin, ci = i - ko * Cin;
    float g[3][3];
    const float* src = w + (flip ? (int64_t(ci) * Kout + ko) : int64_t(i)) * 9;
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
      for (int s = 0; s < 3; ++s) g[r][s] = flip ? src[(2 - r) * 3 + (2 - s)] : src[r * 3 + s];
    float t[4][3];  // G g
#pragma unroll
    for (int s = 0; s < 3; ++s) {
      t[0][s] = g[0][s];
      t[1][s] = 0.5f * (g[0][s] + g[1][s] + g[2][s]);
      t[2][s] = 0.5f * (g[0][s] - g[1][s] + g[2][s]);
      t[3][s] = g[2][s];
    }
    const int64_t stride = int64_t(total);
#pragma unroll
    for (int a = 0; a < 4; ++a) {  // (G g) G^T
      const float u[4] = {t[a][0], 0.5f * (t[a][0] + t[a][1] + t[a][2]), 0.5f * (t[a][0] - t[a][1] + t[a][2]), t[a][2]};
#pragma unroll
      for (int b = 0; b < 4; ++b) U[(a * 4 + b) * stride + i] = u[b];
    }
  }
}

// V (16, S, Cin, Tc) = B^T d B, d the 4x4 input patch of tile t at (2 tp - pad_h, 2 tq - pad_w);
// zero for the slots past T.
static __global__ void conv2d_forward_winograd_input_kernel(const WinogradDims d,
                                                            const float* __restrict__ x,  // (nb, Cin, Hin, Win)
                                                            float* __restrict__ V) {      // (16, S, Cin, Tc)
  const int total = d.S * d.Cin * d.Tc;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    int c, t;
    slot_of(d, i, d.Cin, c, t);
    float v[4][4] = {};
    if (t < d.T) {
      int n, tp, tq;
      tile_of(d, t, n, tp, tq);
      const int h0 = 2 * tp - d.pad_h, w0 = 2 * tq - d.pad_w;
      const float* plane = x + (int64_t(n) * d.Cin + c) * d.Hin * d.Win;
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int h = h0 + a, ww = w0 + b;
          v[a][b] = (h >= 0 && h < d.Hin && ww >= 0 && ww < d.Win) ? plane[h * d.Win + ww] : 0.0f;
        }
    }
    float s[4][4];  // B^T d
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      s[0][b] = v[0][b] - v[2][b];
      s[1][b] = v[1][b] + v[2][b];
      s[2][b] = v[2][b] - v[1][b];
      s[3][b] = v[1][b] - v[3][b];
    }
    const int64_t stride = int64_t(total);
#pragma unroll
    for (int a = 0; a < 4; ++a) {  // (B^T d) B
      V[(a * 4 + 0) * stride + i] = s[a][0] - s[a][2];
      V[(a * 4 + 1) * stride + i] = s[a][1] + s[a][2];
      V[(a * 4 + 2) * stride + i] = s[a][2] - s[a][1];
      V[(a * 4 + 3) * stride + i] = s[a][1] - s[a][3];
    }
  }
}

// y 2x2 tile = A^T m A (+ b), m (16, Kout, T); tiles past (Pout, Qout) write only what fits.
static __global__ void conv2d_forward_winograd_output_kernel(const WinogradDims d,
                                                             const float* __restrict__ M,  // (16, Kout, T)
                                                             const float* __restrict__ b,  // (Kout) or null
                                                             float* __restrict__ y) {      // (nb, Kout, Pout, Qout)
  const int total = d.Kout * d.T;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    const int k = i / d.T, t = i - k * d.T;
    int n, tp, tq;
    tile_of(d, t, n, tp, tq);
    const int64_t stride = int64_t(total);
    float m[4][4];
#pragma unroll
    for (int e = 0; e < 16; ++e) m[e / 4][e % 4] = M[e * stride + i];
    float s[2][4];  // A^T m
#pragma unroll
    for (int b2 = 0; b2 < 4; ++b2) {
      s[0][b2] = m[0][b2] + m[1][b2] + m[2][b2];
      s[1][b2] = m[1][b2] - m[2][b2] - m[3][b2];
    }
    const float bias = b ? b[k] : 0.0f;
    float* plane = y + (int64_t(n) * d.Kout + k) * d.Pout * d.Qout;
#pragma unroll
    for (int a = 0; a < 2; ++a) {
      const float out[2] = {s[a][0] + s[a][1] + s[a][2], s[a][1] - s[a][2] - s[a][3]};
      const int p = 2 * tp + a;
      if (p >= d.Pout) continue;
#pragma unroll
      for (int c2 = 0; c2 < 2; ++c2) {
        const int q = 2 * tq + c2;
        if (q < d.Qout) plane[p * d.Qout + q] = out[c2] + bias;
      }
    }
  }
}

// Yt (16, S, Kout, Tc) = A dY A^T, dY the 2x2 tile of dy (zero past the output edge and for the
// slots past T).
static __global__ void conv2d_backward_filter_winograd_grad_kernel(const WinogradDims d,
                                                                   const float* __restrict__ dy,  // (nb, Kout, P, Q)
                                                                   float* __restrict__ Yt) {      // (16, S, Kout, Tc)
  const int total = d.S * d.Kout * d.Tc;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    int k, t;
    slot_of(d, i, d.Kout, k, t);
    float g[2][2] = {};
    if (t < d.T) {
      int n, tp, tq;
      tile_of(d, t, n, tp, tq);
      const float* plane = dy + (int64_t(n) * d.Kout + k) * d.Pout * d.Qout;
#pragma unroll
      for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int c2 = 0; c2 < 2; ++c2) {
          const int p = 2 * tp + a, q = 2 * tq + c2;
          g[a][c2] = (p < d.Pout && q < d.Qout) ? plane[p * d.Qout + q] : 0.0f;
        }
    }
    // A = [[1,0],[1,1],[1,-1],[0,-1]]; rows of A dY, then columns of (A dY) A^T.
    const float r[4][2] = {{g[0][0], g[0][1]},
                           {g[0][0] + g[1][0], g[0][1] + g[1][1]},
                           {g[0][0] - g[1][0], g[0][1] - g[1][1]},
                           {-g[1][0], -g[1][1]}};
    const int64_t stride = int64_t(total);
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      Yt[(a * 4 + 0) * stride + i] = r[a][0];
      Yt[(a * 4 + 1) * stride + i] = r[a][0] + r[a][1];
      Yt[(a * 4 + 2) * stride + i] = r[a][0] - r[a][1];
      Yt[(a * 4 + 3) * stride + i] = -r[a][1];
    }
  }
}

// dw (K, C, 3, 3) = G^T dU G, dU(e) the sum of the S partials in the order s = 0..S-1 (the same
// bits every run).
static __global__ void conv2d_backward_filter_winograd_filter_kernel(const float* __restrict__ dU,  // (16, S, K, C)
                                                                     float* __restrict__ dw,        // (K, C, 3, 3)
                                                                     int total, int S) {            // total = K * C
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
    float u[4][4];
#pragma unroll
    for (int e = 0; e < 16; ++e) {
      const float* part = dU + int64_t(e) * S * total + i;
      float sum = part[0];
      for (int s = 1; s < S; ++s) sum += part[int64_t(s) * total];
      u[e / 4][e % 4] = sum;
    }
    float t[3][4];  // G^T dU, G^T = [[1,.5,.5,0],[0,.5,-.5,0],[0,.5,.5,1]]
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      t[0][b] = u[0][b] + 0.5f * (u[1][b] + u[2][b]);
      t[1][b] = 0.5f * (u[1][b] - u[2][b]);
      t[2][b] = 0.5f * (u[1][b] + u[2][b]) + u[3][b];
    }
    float* out = dw + int64_t(i) * 9;
#pragma unroll
    for (int r = 0; r < 3; ++r) {
      out[r * 3 + 0] = t[r][0] + 0.5f * (t[r][1] + t[r][2]);
      out[r * 3 + 1] = 0.5f * (t[r][1] - t[r][2]);
      out[r * 3 + 2] = 0.5f * (t[r][1] + t[r][2]) + t[r][3];
    }
  }
}

constexpr int kThreads = 256;

// Shortest split: each product keeps a reduction of at least 1024 tiles, long against the extra
// write and read of its K x C partial (a floor chosen, not tuned).
constexpr int64_t kMinSplitTiles = 1024;

// Splits S of a chunk's T-tile reduction in the filter gradient. Each of its 16 products is only
// K x C, ceil(K/128) ceil(C/128) of cuBLAS's big tiles, so 16 problems can fill a few SMs while
// the rest idle (VGG's conv2_1: 16 blocks for 132 SMs). Enough splits for about cuda::kFillBlocks
// blocks, none shorter than kMinSplitTiles; S = 1 (one reduction) when T is short. Measured on an
// H200, N = 32: conv2_1 3.52 -> 1.37 ms (S = 17), conv3_1 1.44 -> 0.93 ms (S = 9); conv3_2 (S = 5)
// and conv4_2 (S = 2) unchanged within 2%.
static int filter_splits(int64_t T, int Kout, int Cin) {
  const int64_t blocks = 16 * ((int64_t(Kout) + 127) / 128) * ((int64_t(Cin) + 127) / 128);
  const int64_t want = (cuda::kFillBlocks + blocks - 1) / blocks;
  return int(std::max<int64_t>(1, std::min(want, T / kMinSplitTiles)));
}

// Slots a split, Tc: ceil(T / S) rounded up to 4 so every product's operands start 16-byte aligned;
// T itself when S = 1 (the forward layout).
static int split_slots(int64_t T, int S) {
  if (S == 1) return int(T);
  return int(((T + S - 1) / S + 3) / 4 * 4);
}

// The problem one call solves as a forward pass: (N, Cin, Hin, Win) -> (N, Kout, Pout, Qout); S
// splits each chunk's tile reduction (backward_filter; 1 in the other directions).
struct WinogradProblem {
  int64_t N;
  int Cin, Hin, Win, Kout, Pout, Qout, pad_h, pad_w;
  int S;
  int64_t tiles_per_image() const { return int64_t((Pout + 1) / 2) * ((Qout + 1) / 2); }
  int64_t per_image_floats() const { return 16 * (int64_t(Cin) + Kout) * tiles_per_image(); }
  int64_t images_per_chunk() const { return chunk_images(N, size_t(per_image_floats())); }
  // Slots of a full chunk's split; a smaller last chunk needs no more.
  int64_t slots() const { return split_slots(images_per_chunk() * tiles_per_image(), S); }
};

static WinogradProblem problem_of(const Conv2dShape& sh, ConvDir dir) {
  if (dir == ConvDir::backward_data)
    return {sh.N, int(sh.K), int(sh.P), int(sh.Q), int(sh.C), int(sh.H), int(sh.W), 2 - sh.pad_h, 2 - sh.pad_w, 1};
  WinogradProblem pr{sh.N, int(sh.C), int(sh.H), int(sh.W), int(sh.K), int(sh.P), int(sh.Q), sh.pad_h, sh.pad_w, 1};
  if (dir == ConvDir::backward_filter)
    pr.S = filter_splits(pr.images_per_chunk() * pr.tiles_per_image(), pr.Kout, pr.Cin);
  return pr;
}

static WinogradDims chunk_dims(const WinogradProblem& pr, int nb) {
  WinogradDims d{};
  d.nb = nb, d.Cin = pr.Cin, d.Hin = pr.Hin, d.Win = pr.Win, d.Kout = pr.Kout, d.Pout = pr.Pout, d.Qout = pr.Qout;
  d.pad_h = pr.pad_h, d.pad_w = pr.pad_w;
  d.TP = (pr.Pout + 1) / 2, d.TQ = (pr.Qout + 1) / 2, d.T = nb * d.TP * d.TQ;
  d.S = pr.S, d.Tc = split_slots(d.T, d.S);
  return d;
}

// Floats of workspace in three parts: the transformed filters (S partial filter gradients), V, and
// M or dY's transform (S splits of Tc slots, the full chunk's).
static size_t filter_part_floats(const WinogradProblem& pr) {
  return round_floats(size_t(16) * pr.S * pr.Kout * pr.Cin);
}
static size_t input_part_floats(const WinogradProblem& pr) {
  return round_floats(size_t(16) * pr.S * pr.Cin * size_t(pr.slots()));
}
static size_t workspace_floats_of(const WinogradProblem& pr) {
  return filter_part_floats(pr) + input_part_floats(pr) +
         round_floats(size_t(16) * pr.S * pr.Kout * size_t(pr.slots()));
}

static void launch_input_transform(const WinogradDims& d, const float* x, float* V, cudaStream_t stream) {
  conv2d_forward_winograd_input_kernel<<<cuda::grid_blocks(int64_t(d.S) * d.Cin * d.Tc, kThreads), kThreads, 0,
                                         stream>>>(d, x, V);
  CUDA_CHECK_LAUNCH("conv2d_forward_winograd_input_kernel");
}

static void winograd_forward(const ExecContext& ctx, const WinogradProblem& pr, const float* x, const float* w,
                             bool flip, const float* b, float* y) {
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  const cublasHandle_t blas = blas_on_stream(ctx);
  const int64_t nb = pr.images_per_chunk();
  float* U = workspace_floats(ctx, workspace_floats_of(pr), "winograd");
  float* V = U + filter_part_floats(pr);
  float* M = V + input_part_floats(pr);
  const int KC = pr.Kout * pr.Cin;
  conv2d_forward_winograd_filter_kernel<<<cuda::grid_blocks(KC, kThreads), kThreads, 0, stream>>>(w, U, pr.Kout, pr.Cin,
                                                                                                  flip);
  CUDA_CHECK_LAUNCH("conv2d_forward_winograd_filter_kernel");
  for (int64_t n0 = 0; n0 < pr.N; n0 += nb) {
    const WinogradDims d = chunk_dims(pr, int(std::min<int64_t>(nb, pr.N - n0)));
    launch_input_transform(d, x + n0 * pr.Cin * pr.Hin * pr.Win, V, stream);
    // Row-major M(e) (Kout, T) = U(e) (Kout, Cin) V(e) (Cin, T); column-major: M^T = V^T U^T.
    const float one = 1.0f, zero = 0.0f;
    check_cublas(
        cublasSgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_N, d.T, pr.Kout, pr.Cin, &one, V, d.T,
                                  int64_t(pr.Cin) * d.T, U, pr.Cin, KC, &zero, M, d.T, int64_t(pr.Kout) * d.T, 16),
        "cublasSgemmStridedBatched (winograd)");
    conv2d_forward_winograd_output_kernel<<<cuda::grid_blocks(int64_t(d.Kout) * d.T, kThreads), kThreads, 0, stream>>>(
        d, M, b, y + n0 * pr.Kout * pr.Pout * pr.Qout);
    CUDA_CHECK_LAUNCH("conv2d_forward_winograd_output_kernel");
  }
}

static void winograd_backward_filter(const ExecContext& ctx, const Conv2dShape& sh, const float* x, const float* dy,
                                     float* dw, float* db) {
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.cuda_stream);
  const cublasHandle_t blas = blas_on_stream(ctx);
  const WinogradProblem pr = problem_of(sh, ConvDir::backward_filter);
  const int64_t nb = pr.images_per_chunk();
  float* dU = workspace_floats(ctx, workspace_floats_of(pr), "winograd");  // (16, S, Kout, Cin) partials
  float* V = dU + filter_part_floats(pr);
  float* Yt = V + input_part_floats(pr);
  const int KC = pr.Kout * pr.Cin;
  for (int64_t n0 = 0; n0 < pr.N; n0 += nb) {
    const WinogradDims d = chunk_dims(pr, int(std::min<int64_t>(nb, pr.N - n0)));
    launch_input_transform(d, x + n0 * pr.Cin * pr.Hin * pr.Win, V, stream);
    conv2d_backward_filter_winograd_grad_kernel<<<cuda::grid_blocks(int64_t(d.S) * d.Kout * d.Tc, kThreads), kThreads,
                                                  0, stream>>>(d, dy + n0 * pr.Kout * pr.Pout * pr.Qout, Yt);
    CUDA_CHECK_LAUNCH("conv2d_backward_filter_winograd_grad_kernel");
    // Problem (e, s), e * S + s of the batch: row-major dU(e, s) (K, C) += Yt(e, s) (K, Tc) V(e, s)^T;
    // column-major: dU^T (C, K) = V^T(cm) Yt(cm). The zero slots past T add nothing.
    const float one = 1.0f, beta = n0 == 0 ? 0.0f : 1.0f;
    check_cublas(cublasSgemmStridedBatched(blas, CUBLAS_OP_T, CUBLAS_OP_N, pr.Cin, pr.Kout, d.Tc, &one, V, d.Tc,
                                           int64_t(pr.Cin) * d.Tc, Yt, d.Tc, int64_t(pr.Kout) * d.Tc, &beta, dU, pr.Cin,
                                           KC, 16 * d.S),
                 "cublasSgemmStridedBatched (winograd filter gradient)");
  }
  conv2d_backward_filter_winograd_filter_kernel<<<cuda::grid_blocks(KC, kThreads), kThreads, 0, stream>>>(dU, dw, KC,
                                                                                                          pr.S);
  CUDA_CHECK_LAUNCH("conv2d_backward_filter_winograd_filter_kernel");
  if (db) bias_grad(dy, db, sh.N, sh.K, sh.P * sh.Q, stream);
}

bool conv2d_cuda_winograd_can_implement(const Conv2dShape& sh, ConvDir dir) {
  return conv2d_winograd_shape_supported(sh, dir);
}

size_t conv2d_cuda_winograd_workspace_bytes(const Conv2dShape& sh, ConvDir dir) {
  if (!conv2d_winograd_shape_supported(sh, dir)) return 0;
  return workspace_floats_of(problem_of(sh, dir)) * sizeof(float);
}

void conv2d_cuda_winograd_run(const ExecContext& ctx, const Conv2dShape& sh, ConvDir dir, const ConvOperandsF32& op) {
  CNN_CHECK(conv2d_winograd_shape_supported(sh, dir),
            "conv2d winograd cannot implement {} for {} (needs 3x3, stride 1, dilation 1, groups 1{})", to_string(dir),
            sh.to_string(), dir == ConvDir::backward_data ? ", padding <= 2" : "");
  switch (dir) {
    case ConvDir::forward:
      CNN_CHECK(op.x && op.w && op.y, "conv2d winograd forward: x, w and y must not be null");
      winograd_forward(ctx, problem_of(sh, dir), op.x, op.w, false, sh.has_bias ? op.b : nullptr, op.y);
      break;
    case ConvDir::backward_data:
      CNN_CHECK(op.w && op.dy && op.dx, "conv2d winograd backward_data: w, dy and dx must not be null");
      winograd_forward(ctx, problem_of(sh, dir), op.dy, op.w, true, nullptr, op.dx);
      break;
    case ConvDir::backward_filter:
      CNN_CHECK(op.x && op.dy && op.dw, "conv2d winograd backward_filter: x, dy and dw must not be null");
      winograd_backward_filter(ctx, sh, op.x, op.dy, op.dw, op.db);
      break;
  }
}

}  // namespace cnn
