// Softmax cross-entropy on the GPU: one warp per row (max-subtracted log-sum-exp, double sums as on
// the CPU), then one block reduces the weighted per-sample losses in a fixed order (bitwise
// repeatable); backward is one warp per row after the same fixed-order sum of label weights.
// Trap: the GPU cannot throw: a label outside [0, K) makes that sample's loss (and weight) NaN, so
// the batch loss and every gradient turn NaN and the host's finiteness check reports it.
#include <cmath>

#include "core/cuda_check.h"
#include "ops/reduce.cuh"
#include "ops/softmax_cross_entropy.h"

namespace cnn {

static constexpr int kThreads = 256;
static constexpr int kRowsPerBlock = kThreads / cuda::kWarpSize;

__device__ __forceinline__ bool valid_label(int32_t label, int K) { return label >= 0 && label < K; }

// w[label] (1 without class weights), NaN for an invalid label.
__device__ __forceinline__ double label_weight(int32_t label, int K, const float* class_weights) {
  if (!valid_label(label, K)) return NAN;
  return class_weights ? static_cast<double>(class_weights[label]) : 1.0;
}

// Per row: probs, the unweighted sample loss, and (w * loss, w) for the batch reduction.
static __global__ void softmax_cross_entropy_forward_warp_kernel(
    int64_t N, int K, float ls,
    const float* __restrict__ logits,         // (N, K)
    const int32_t* __restrict__ labels,       // (N)
    const float* __restrict__ class_weights,  // (K) or null
    float* __restrict__ probs,                // (N, K)
    float* __restrict__ sample_loss,          // (N) or null
    double* __restrict__ row_terms) {         // (N, 2)
  const int lane = threadIdx.x % cuda::kWarpSize;
  const int64_t rows_per_grid = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / cuda::kWarpSize; n < N;
       n += rows_per_grid) {
    const float* z = logits + n * K;
    float m = -INFINITY;
    for (int k = lane; k < K; k += cuda::kWarpSize) m = fmaxf(m, z[k]);
#pragma unroll
    for (int offset = cuda::kWarpSize / 2; offset > 0; offset >>= 1)
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    double sum_exp = 0.0, sum_z = 0.0;
    for (int k = lane; k < K; k += cuda::kWarpSize) {
      sum_exp += static_cast<double>(expf(z[k] - m));
      sum_z += static_cast<double>(z[k]);
    }
    sum_exp = cuda::warp_sum(sum_exp);
    sum_z = cuda::warp_sum(sum_z);
    const float inv = static_cast<float>(1.0 / sum_exp);
    float* p = probs + n * K;
    for (int k = lane; k < K; k += cuda::kWarpSize) p[k] = expf(z[k] - m) * inv;
    if (lane != 0) continue;
    const double lse = static_cast<double>(m) + log(sum_exp);
    const int32_t label = labels[n];
    double loss = NAN;
    if (valid_label(label, K)) {
      const double sum_logp = sum_z - static_cast<double>(K) * lse;
      loss = -((1.0 - ls) * (static_cast<double>(z[label]) - lse) + static_cast<double>(ls) / K * sum_logp);
    }
    const double w = label_weight(label, K, class_weights);
    if (sample_loss) sample_loss[n] = static_cast<float>(loss);
    row_terms[2 * n] = w * loss;
    row_terms[2 * n + 1] = w;
  }
}

// One block: sum_n w_n l_n / sum_n w_n, each thread summing a fixed strided subset in order.
static __global__ void softmax_cross_entropy_forward_batch_kernel(
    int64_t N,
    const double* __restrict__ row_terms,  // (N, 2)
    double* __restrict__ loss,             // device scalar
    float* __restrict__ loss_f) {          // device scalar or null
  __shared__ double shared[kThreads / cuda::kWarpSize];
  double weighted = 0.0, weights = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += kThreads) {
    weighted += row_terms[2 * n];
    weights += row_terms[2 * n + 1];
  }
  weighted = cuda::block_sum<kThreads>(weighted, shared);
  weights = cuda::block_sum<kThreads>(weights, shared);
  if (threadIdx.x == 0) {
    const double r = weighted / weights;
    *loss = r;
    if (loss_f) *loss_f = static_cast<float>(r);
  }
}

// One block: sum_n w[label_n] for the backward's normaliser.
static __global__ void softmax_cross_entropy_backward_weights_kernel(
    int64_t N, int K,
    const int32_t* __restrict__ labels,       // (N)
    const float* __restrict__ class_weights,  // (K) or null
    double* __restrict__ weight_sum) {        // device scalar
  __shared__ double shared[kThreads / cuda::kWarpSize];
  double sum = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += kThreads) sum += label_weight(labels[n], K, class_weights);
  sum = cuda::block_sum<kThreads>(sum, shared);
  if (threadIdx.x == 0) *weight_sum = sum;
}

// dz = w / sum_w * (p - q), q = ls/K + (1 - ls) onehot, with the CPU's float roundings.
static __global__ void softmax_cross_entropy_backward_warp_kernel(
    int64_t N, int K, float ls,
    const float* __restrict__ probs,          // (N, K)
    const int32_t* __restrict__ labels,       // (N)
    const float* __restrict__ class_weights,  // (K) or null
    const double* __restrict__ weight_sum,    // scalar
    float* __restrict__ dlogits) {            // (N, K)
  const int lane = threadIdx.x % cuda::kWarpSize;
  const int64_t rows_per_grid = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  const double ws = *weight_sum;
  const double lsd = ls;
  const float smooth = static_cast<float>(lsd / static_cast<double>(K));
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / cuda::kWarpSize; n < N;
       n += rows_per_grid) {
    const int32_t label = labels[n];
    const double w = label_weight(label, K, class_weights);
    const float scale = static_cast<float>(w / ws);
    const float target = static_cast<float>(w / ws * (1.0 - lsd));
    const float* p = probs + n * K;
    float* d = dlogits + n * K;
    for (int k = lane; k < K; k += cuda::kWarpSize) {
      const float g = __fmul_rn(scale, p[k] - smooth);  // no FMA: the CPU rounds the product first
      d[k] = k == label ? g - target : g;
    }
  }
}

static void check_shape(const char* what, const SoftmaxCrossEntropyShape& sh) {
  if (sh.N <= 0 || sh.K <= 0) CNN_THROW("{}: N and K must be positive, got N={} K={}", what, sh.N, sh.K);
  if (!(sh.label_smoothing >= 0.0f && sh.label_smoothing < 1.0f))
    CNN_THROW("{}: label_smoothing must be in [0, 1), got {}", what, sh.label_smoothing);
  if (!cuda::fits_int32(sh.K)) CNN_THROW("{}: {} classes exceed the CUDA kernels' int32 indexing", what, sh.K);
}

// Queues the forward; the batch loss lands in the returned device double (workspace) and in
// batch_loss_f when given.
static const double* launch_forward(const ExecContext& ctx, const char* what, const SoftmaxCrossEntropyShape& sh,
                                    const float* logits, const int32_t* labels, const float* class_weights,
                                    float* probs, float* sample_loss, float* batch_loss_f) {
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_shape(what, sh);
  double* scratch = static_cast<double*>(cuda::workspace_bytes(ctx, (2 * sh.N + 1) * sizeof(double), what));
  double* row_terms = scratch + 1;
  const int K = static_cast<int>(sh.K);
  softmax_cross_entropy_forward_warp_kernel<<<cuda::grid_blocks(sh.N, kRowsPerBlock), kThreads, 0, stream>>>(
      sh.N, K, sh.label_smoothing, logits, labels, class_weights, probs, sample_loss, row_terms);
  CUDA_CHECK_LAUNCH("softmax_cross_entropy forward (rows)");
  softmax_cross_entropy_forward_batch_kernel<<<1, kThreads, 0, stream>>>(sh.N, row_terms, scratch, batch_loss_f);
  CUDA_CHECK_LAUNCH("softmax_cross_entropy forward (batch loss)");
  return scratch;
}

void softmax_cross_entropy_forward_cuda(const SoftmaxCrossEntropyForward& a) {
  const char* what = "softmax_cross_entropy forward";
  const double* loss = launch_forward(*a.ctx, what, a.sh, a.logits.f32(), a.labels, a.class_weights, a.probs,
                                      a.sample_loss, nullptr);
  cudaStream_t stream = cuda::stream_of(*a.ctx, what);
  double host = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&host, loss, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  if (a.batch_loss) *a.batch_loss = host;
}

void softmax_cross_entropy_forward_cuda_async(const SoftmaxCrossEntropyForwardAsync& a) {
  const char* what = "softmax_cross_entropy forward (async)";
  CNN_CHECK(a.batch_loss != nullptr, "{}: batch_loss must point to a device float", what);
  launch_forward(*a.ctx, what, a.sh, a.logits.f32(), a.labels, a.class_weights, a.probs, a.sample_loss, a.batch_loss);
}

void softmax_cross_entropy_backward_cuda(const SoftmaxCrossEntropyBackward& a) {
  const char* what = "softmax_cross_entropy backward";
  const ExecContext& ctx = *a.ctx;
  const SoftmaxCrossEntropyShape& sh = a.sh;
  const float *probs = a.probs, *class_weights = a.class_weights;
  const int32_t* labels = a.labels;
  float* dlogits = a.dlogits.f32();
  cudaStream_t stream = cuda::stream_of(ctx, what);
  check_shape(what, sh);
  double* weight_sum = static_cast<double*>(cuda::workspace_bytes(ctx, sizeof(double), what));
  const int K = static_cast<int>(sh.K);
  softmax_cross_entropy_backward_weights_kernel<<<1, kThreads, 0, stream>>>(sh.N, K, labels, class_weights, weight_sum);
  CUDA_CHECK_LAUNCH("softmax_cross_entropy backward (weights)");
  softmax_cross_entropy_backward_warp_kernel<<<cuda::grid_blocks(sh.N, kRowsPerBlock), kThreads, 0, stream>>>(
      sh.N, K, sh.label_smoothing, probs, labels, class_weights, weight_sum, dlogits);
  CUDA_CHECK_LAUNCH("softmax_cross_entropy backward (rows)");
}

}  // namespace cnn
