// Evaluation metrics against hand-computed values.
#include <nlohmann/json.hpp>

#include "support/catch.h"
#include "eval/metrics.h"

using namespace cnn;

TEST_CASE("confusion metrics match a hand-computed example", "[cpu]") {
  ConfusionAccumulator acc({"a", "b", "c"});
  // Scores pick: sample0 a (true a), sample1 b (true a), sample2 b (true b), sample3 a (true c).
  std::vector<float> s{0.9f, 0.05f, 0.05f, 0.2f, 0.7f, 0.1f, 0.1f, 0.8f, 0.1f, 0.6f, 0.1f, 0.3f};
  std::vector<int32_t> y{0, 0, 1, 2};
  acc.add(s.data(), y.data(), 4, 2.0);
  EvalReport r = acc.report("test");
  CHECK(r.n == 4);
  CHECK(r.loss == Approx(0.5));
  CHECK(r.top1 == Approx(0.5));
  CHECK(r.top5 == Approx(1.0));  // only 3 classes: always within the top 5
  CHECK(r.confusion == std::vector<std::vector<int64_t>>{{1, 1, 0}, {0, 1, 0}, {1, 0, 0}});
  // a: tp 1, predicted 2, actual 2 -> p .5 r .5 f1 .5; b: p .5 r 1 f1 2/3; c: 0 0 0
  CHECK(r.per_class[0].precision == Approx(0.5));
  CHECK(r.per_class[1].recall == Approx(1.0));
  CHECK(r.per_class[1].f1 == Approx(2.0 / 3.0));
  CHECK(r.per_class[2].f1 == 0.0);
  CHECK(r.per_class[2].support == 1);
  CHECK(r.macro_f1 == Approx((0.5 + 2.0 / 3.0) / 3.0));
}

TEST_CASE("top-5 counts the true class among the five highest scores", "[cpu]") {
  std::vector<std::string> names;
  for (int i = 0; i < 7; ++i) names.push_back("c" + std::to_string(i));
  ConfusionAccumulator acc(names);
  std::vector<float> s{7, 6, 5, 4, 3, 2, 1};
  int32_t in_top5 = 4, outside = 5;
  acc.add(s.data(), &in_top5, 1, 0);
  acc.add(s.data(), &outside, 1, 0);
  CHECK(acc.report("val").top5 == Approx(0.5));
}

TEST_CASE("evaluation JSON has the fields of the design", "[cpu]") {
  ConfusionAccumulator acc({"x", "y"});
  std::vector<float> s{1, 0, 0, 1};
  std::vector<int32_t> y{0, 1};
  acc.add(s.data(), y.data(), 2, 0.2);
  auto j = nlohmann::json::parse(acc.report("test").to_json());
  for (const char* k : {"split", "n", "loss", "top1", "top5", "macro_f1", "per_class", "confusion"})
    CHECK(j.contains(k));
  CHECK(j["per_class"][1]["name"] == "y");
  CHECK(j["confusion"][1][1] == 1);
  CHECK(j["top1"] == 1.0);
}
