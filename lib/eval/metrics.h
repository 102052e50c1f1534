// Classification metrics: running loss/accuracy for training, and the full evaluation report
// (loss, top-1, top-5, per-class precision/recall/F1, macro-F1, confusion matrix) with the JSON
// of the README's `cnn-eval` section. Trap: a class with no predictions has precision 0 (not NaN), as in scikit-learn's
// zero_division=0, and macro-F1 averages over all classes, present or not.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cnn {

struct ClassReport {
  std::string name;
  double precision = 0, recall = 0, f1 = 0;
  int64_t support = 0;
};

struct EvalReport {
  std::string split;
  int64_t n = 0;
  double loss = 0, top1 = 0, top5 = 0, macro_f1 = 0;
  std::vector<ClassReport> per_class;
  std::vector<std::vector<int64_t>> confusion;  // [true][predicted]
  std::string to_json() const;
  std::string to_table() const;  // human-readable summary, per-class table and confusion matrix
};

class ConfusionAccumulator {
public:
  explicit ConfusionAccumulator(std::vector<std::string> class_names);
  // probs (n, K) (or any scores; argmax and top-5 use them), labels (n), per-sample losses (n).
  void add(const float* scores, const int32_t* labels, int64_t n, double loss_sum);
  EvalReport report(const std::string& split) const;
  int64_t count() const { return m_n; }

private:
  std::vector<std::string> m_names;
  std::vector<std::vector<int64_t>> m_confusion;
  int64_t m_n = 0, m_top5 = 0;
  double m_loss_sum = 0;
};

}  // namespace cnn
