// Softmax cross-entropy on the CPU: per sample log-sum-exp after subtracting the max logit, so
// large logits neither overflow nor lose the loss; the batch loss is summed serially in double.
// Trap: with class weights the loss is normalised by the sum of the batch's label weights (not N),
// and the gradient carries the same normaliser; sample_loss holds the unweighted l_n.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "ops/softmax_cross_entropy.h"

namespace cnn {

static void check_shape(const char* what, const SoftmaxCrossEntropyShape& sh) {
  if (sh.N <= 0 || sh.K <= 0)
    CNN_THROW("softmax_cross_entropy {}: N and K must be positive, got N={} K={}", what, sh.N, sh.K);
  if (!(sh.label_smoothing >= 0.0f && sh.label_smoothing < 1.0f))
    CNN_THROW("softmax_cross_entropy {}: label_smoothing must be in [0, 1), got {}", what, sh.label_smoothing);
}

// Checks every label and returns the normaliser sum_n w[label_n] (N without class weights).
template <typename T>
static double label_weight_sum(const char* what, const SoftmaxCrossEntropyShape& sh,
                               const int32_t* labels,       // (N)
                               const T* class_weights) {    // (K) or null
  check_shape(what, sh);
  double sum = 0.0;
  for (int64_t n = 0; n < sh.N; ++n) {
    const int64_t label = labels[n];
    if (label < 0 || label >= sh.K)
      CNN_THROW("softmax_cross_entropy {}: sample {} has label {}, expected a class in [0, {})", what, n, label,
                sh.K);
    const double w = class_weights ? static_cast<double>(class_weights[label]) : 1.0;
    if (!(w >= 0.0 && std::isfinite(w)))
      CNN_THROW("softmax_cross_entropy {}: class weight {} of class {} must be finite and non-negative", what, w,
                label);
    sum += w;
  }
  if (!(sum > 0.0))
    CNN_THROW("softmax_cross_entropy {}: the class weights of the batch's labels sum to {}, expected > 0", what, sum);
  return sum;
}

template <typename T>
double softmax_cross_entropy_forward_reference(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                               const T* logits,          // (N, K)
                                               const int32_t* labels,    // (N)
                                               const T* class_weights,   // (K) or null
                                               T* probs,                 // (N, K)
                                               T* sample_loss) {         // (N) or null
  const double weight_sum = label_weight_sum("forward", sh, labels, class_weights);
  const int64_t K = sh.K;
  const double ls = sh.label_smoothing;
  double weighted = 0.0;
  for (int64_t n = 0; n < sh.N; ++n) {
    const T* z = logits + n * K;
    double m = z[0];
    for (int64_t k = 1; k < K; ++k) m = std::max(m, static_cast<double>(z[k]));
    double sum_exp = 0.0;
    for (int64_t k = 0; k < K; ++k) sum_exp += std::exp(static_cast<double>(z[k]) - m);
    const double lse = m + std::log(sum_exp);
    double sum_logp = 0.0;
    for (int64_t k = 0; k < K; ++k) {
      probs[n * K + k] = static_cast<T>(std::exp(static_cast<double>(z[k]) - lse));
      sum_logp += static_cast<double>(z[k]) - lse;
    }
    // -sum_k q_k log p_k with q = (1 - ls) onehot + ls / K
    const double loss = -((1.0 - ls) * (static_cast<double>(z[labels[n]]) - lse) + ls / K * sum_logp);
    if (sample_loss) sample_loss[n] = static_cast<T>(loss);
    weighted += (class_weights ? static_cast<double>(class_weights[labels[n]]) : 1.0) * loss;
  }
  return weighted / weight_sum;
}

// d(batch loss)/dz_nk = w_n / sum_w * (p_nk - q_nk), because sum_k q_nk = 1.
template <typename T>
void softmax_cross_entropy_backward_reference(const ExecContext& ctx, const SoftmaxCrossEntropyShape& sh,
                                              const T* probs,          // (N, K)
                                              const int32_t* labels,   // (N)
                                              const T* class_weights,  // (K) or null
                                              T* dlogits) {            // (N, K)
  const double weight_sum = label_weight_sum("backward", sh, labels, class_weights);
  const int64_t K = sh.K;
  const double ls = sh.label_smoothing;
  for (int64_t n = 0; n < sh.N; ++n) {
    const double w = class_weights ? static_cast<double>(class_weights[labels[n]]) : 1.0;
    for (int64_t k = 0; k < K; ++k) {
      const double q = ls / K + (k == labels[n] ? 1.0 - ls : 0.0);
      dlogits[n * K + k] = static_cast<T>(w / weight_sum * (static_cast<double>(probs[n * K + k]) - q));
    }
  }
}

template double softmax_cross_entropy_forward_reference<float>(const ExecContext&, const SoftmaxCrossEntropyShape&,
                                                               const float*, const int32_t*, const float*, float*,
                                                               float*);
template double softmax_cross_entropy_forward_reference<double>(const ExecContext&,
                                                                const SoftmaxCrossEntropyShape&, const double*,
                                                                const int32_t*, const double*, double*, double*);
template void softmax_cross_entropy_backward_reference<float>(const ExecContext&, const SoftmaxCrossEntropyShape&,
                                                              const float*, const int32_t*, const float*, float*);
template void softmax_cross_entropy_backward_reference<double>(const ExecContext&,
                                                               const SoftmaxCrossEntropyShape&, const double*,
                                                               const int32_t*, const double*, double*);

// Samples in parallel; the batch sum runs serially afterwards so the loss does not depend on threads.
void softmax_cross_entropy_forward_cpu(const SoftmaxCrossEntropyForward& a) {
  const SoftmaxCrossEntropyShape& sh = a.sh;
  const float *logits = a.logits.f32(), *class_weights = a.class_weights;
  const int32_t* labels = a.labels;
  float *probs = a.probs, *sample_loss = a.sample_loss;
  const double weight_sum = label_weight_sum("forward", sh, labels, class_weights);
  const int64_t N = sh.N, K = sh.K;
  const float ls = sh.label_smoothing;
  std::vector<double> losses(static_cast<size_t>(N));
  double* loss_out = losses.data();
  const int threads = a.ctx->threads();
#pragma omp parallel for num_threads(threads) if (N * K >= (int64_t{1} << 14)) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits + n * K;
    float* p = probs + n * K;
    float m = z[0];
#pragma omp simd reduction(max : m)
    for (int64_t k = 1; k < K; ++k) m = std::max(m, z[k]);
    double sum_exp = 0.0, sum_z = 0.0;
#pragma omp simd reduction(+ : sum_exp, sum_z)
    for (int64_t k = 0; k < K; ++k) {
      const float e = std::exp(z[k] - m);
      p[k] = e;
      sum_exp += e;
      sum_z += z[k];
    }
    const float inv = static_cast<float>(1.0 / sum_exp);
#pragma omp simd
    for (int64_t k = 0; k < K; ++k) p[k] *= inv;
    const double lse = m + std::log(sum_exp);
    const double sum_logp = sum_z - static_cast<double>(K) * lse;
    loss_out[n] = -((1.0 - ls) * (static_cast<double>(z[labels[n]]) - lse) + static_cast<double>(ls) / K * sum_logp);
  }
  double weighted = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    if (sample_loss) sample_loss[n] = static_cast<float>(losses[n]);
    weighted += (class_weights ? static_cast<double>(class_weights[labels[n]]) : 1.0) * losses[n];
  }
  if (a.batch_loss) *a.batch_loss = weighted / weight_sum;
}

void softmax_cross_entropy_backward_cpu(const SoftmaxCrossEntropyBackward& a) {
  const SoftmaxCrossEntropyShape& sh = a.sh;
  const float *probs = a.probs, *class_weights = a.class_weights;
  const int32_t* labels = a.labels;
  float* dlogits = a.dlogits.f32();
  const double weight_sum = label_weight_sum("backward", sh, labels, class_weights);
  const int64_t N = sh.N, K = sh.K;
  const double ls = sh.label_smoothing;
  const int threads = a.ctx->threads();
#pragma omp parallel for num_threads(threads) if (N * K >= (int64_t{1} << 14)) schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const double w = class_weights ? static_cast<double>(class_weights[labels[n]]) : 1.0;
    const float scale = static_cast<float>(w / weight_sum);
    const float smooth = static_cast<float>(ls / static_cast<double>(K));
    const float* p = probs + n * K;
    float* d = dlogits + n * K;
#pragma omp simd
    for (int64_t k = 0; k < K; ++k) d[k] = scale * (p[k] - smooth);
    d[labels[n]] -= static_cast<float>(w / weight_sum * (1.0 - ls));
  }
}

}  // namespace cnn
