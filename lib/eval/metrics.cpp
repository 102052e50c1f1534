// Metrics accumulation and formatting (see metrics.h).
#include "eval/metrics.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "core/error.h"

namespace cnn {

ConfusionAccumulator::ConfusionAccumulator(std::vector<std::string> class_names) : m_names(std::move(class_names)) {
  m_confusion.assign(m_names.size(), std::vector<int64_t>(m_names.size(), 0));
}

void ConfusionAccumulator::add(const float* scores, const int32_t* labels, int64_t n, double loss_sum) {
  const int64_t K = static_cast<int64_t>(m_names.size());
  for (int64_t i = 0; i < n; ++i) {
    const float* s = scores + i * K;
    int32_t y = labels[i];
    CNN_CHECK(y >= 0 && y < K, "label {} of sample {} outside [0, {})", y, i, K);
    int64_t best = 0;
    for (int64_t k = 1; k < K; ++k)
      if (s[k] > s[best]) best = k;
    ++m_confusion[size_t(y)][size_t(best)];
    // Top-5: the true class is among the 5 highest scores (ties broken by index, like argmax).
    int64_t higher = 0;
    for (int64_t k = 0; k < K; ++k)
      if (s[k] > s[y] || (s[k] == s[y] && k < y)) ++higher;
    if (higher < 5) ++m_top5;
  }
  m_n += n;
  m_loss_sum += loss_sum;
}

EvalReport ConfusionAccumulator::report(const std::string& split) const {
  EvalReport r;
  r.split = split;
  r.n = m_n;
  r.confusion = m_confusion;
  const size_t K = m_names.size();
  int64_t correct = 0;
  double f1_sum = 0;
  for (size_t c = 0; c < K; ++c) {
    int64_t tp = m_confusion[c][c], actual = 0, predicted = 0;
    for (size_t j = 0; j < K; ++j) {
      actual += m_confusion[c][j];
      predicted += m_confusion[j][c];
    }
    correct += tp;
    ClassReport cr;
    cr.name = m_names[c];
    cr.support = actual;
    cr.precision = predicted ? double(tp) / predicted : 0.0;
    cr.recall = actual ? double(tp) / actual : 0.0;
    cr.f1 = cr.precision + cr.recall > 0 ? 2 * cr.precision * cr.recall / (cr.precision + cr.recall) : 0.0;
    f1_sum += cr.f1;
    r.per_class.push_back(cr);
  }
  r.loss = m_n ? m_loss_sum / m_n : 0.0;
  r.top1 = m_n ? double(correct) / m_n : 0.0;
  r.top5 = m_n ? double(m_top5) / m_n : 0.0;
  r.macro_f1 = K ? f1_sum / K : 0.0;
  return r;
}

std::string EvalReport::to_json() const {
  nlohmann::json j;
  j["split"] = split;
  j["n"] = n;
  j["loss"] = loss;
  j["top1"] = top1;
  j["top5"] = top5;
  j["macro_f1"] = macro_f1;
  j["per_class"] = nlohmann::json::array();
  for (const auto& c : per_class)
    j["per_class"].push_back(
        {{"name", c.name}, {"precision", c.precision}, {"recall", c.recall}, {"f1", c.f1}, {"support", c.support}});
  j["confusion"] = confusion;
  return j.dump(2);
}

std::string EvalReport::to_table() const {
  std::string out = fmt::format("{} split: {} images, loss {:.4f}, top-1 {:.2f}%, top-5 {:.2f}%, macro-F1 {:.4f}\n",
                                split, n, loss, 100 * top1, 100 * top5, macro_f1);
  size_t w = 5;
  for (const auto& c : per_class) w = std::max(w, c.name.size());
  out += fmt::format("{:<{}}  {:>9}  {:>6}  {:>6}  {:>7}\n", "class", w, "precision", "recall", "f1", "support");
  for (const auto& c : per_class)
    out += fmt::format("{:<{}}  {:>9.4f}  {:>6.4f}  {:>6.4f}  {:>7}\n", c.name, w, c.precision, c.recall, c.f1, c.support);
  out += "confusion matrix (rows: true class, columns: predicted)\n";
  size_t cw = 4;
  for (const auto& row : confusion)
    for (int64_t v : row) cw = std::max(cw, std::to_string(v).size());
  out += fmt::format("{:<{}}", "", w);
  for (size_t j = 0; j < per_class.size(); ++j)
    out += fmt::format("  {:>{}}", per_class[j].name.substr(0, cw), cw);
  out += "\n";
  for (size_t i = 0; i < confusion.size(); ++i) {
    out += fmt::format("{:<{}}", per_class[i].name, w);
    for (int64_t v : confusion[i]) out += fmt::format("  {:>{}}", v, cw);
    out += "\n";
  }
  return out;
}

}  // namespace cnn
