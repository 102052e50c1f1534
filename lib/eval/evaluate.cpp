// Evaluation loop (see evaluate.h).
#include "eval/evaluate.h"

#include <cmath>

#include "core/error.h"
#include "ops/softmax_cross_entropy.h"

namespace cnn {

void load_batch_input(Executor& ex, const Batch& batch) {
  int64_t rows = batch.images.shape()[0];
  CNN_CHECK(rows <= ex.max_batch(), "batch of {} images, executor planned for {}", rows, ex.max_batch());
  ex.set_input_dtype(DType::f32);  // a host batch is f32 NCHW (the GPU-resident one may have been 16-bit)
  device_memcpy(ex.input().data(), ex.input().device(), batch.images.data(), Device::cpu, batch.images.bytes());
}

EvalReport evaluate(Executor& ex, Loader& loader, const std::vector<std::string>& class_names,
                    const std::string& split, double label_smoothing) {
  const int64_t K = static_cast<int64_t>(class_names.size());
  ConfusionAccumulator acc(class_names);
  loader.start_epoch(0);
  Batch b;
  std::vector<float> probs, avg;
  while (loader.next(b)) {
    const int64_t n = b.size();
    if (n == 0) continue;
    const int64_t rows = n * b.crops;
    load_batch_input(ex, b);
    ex.forward(rows, false, 0, 0);
    std::vector<float> logits = ex.output().to_vector();
    probs.resize(size_t(rows * K));
    std::vector<int32_t> crop_labels;
    for (int64_t i = 0; i < n; ++i)
      for (int c = 0; c < b.crops; ++c) crop_labels.push_back(b.labels[size_t(i)]);
    SoftmaxCrossEntropyShape sh{rows, K, float(label_smoothing)};
    run_op(Backend::cpu, SoftmaxCrossEntropyForward{&ex.context(), sh, logits.data(), crop_labels.data(), nullptr,
                                                    probs.data(), nullptr, nullptr});
    avg.assign(size_t(n * K), 0.0f);
    double loss_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int c = 0; c < b.crops; ++c)
        for (int64_t k = 0; k < K; ++k) avg[size_t(i * K + k)] += probs[size_t((i * b.crops + c) * K + k)] / float(b.crops);
      // Cross-entropy of the (averaged) probabilities against the smoothed target.
      int32_t y = b.labels[size_t(i)];
      double l = 0;
      for (int64_t k = 0; k < K; ++k) {
        double q = (k == y ? 1.0 - label_smoothing : 0.0) + label_smoothing / double(K);
        if (q > 0) l -= q * std::log(std::max(double(avg[size_t(i * K + k)]), 1e-30));
      }
      loss_sum += l;
    }
    acc.add(avg.data(), b.labels.data(), n, loss_sum);
  }
  return acc.report(split);
}

}  // namespace cnn
