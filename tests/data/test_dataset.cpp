#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"
#include "data/parallel_errors.h"
#include "data/synthetic_faces.h"
#include "data_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using cnn::test::error_of;

namespace {

// A split whose 2-byte images encode their index (so moves between splits can be traced).
DataSplits traceable(int64_t n, int64_t classes) {
  DataSplits s;
  s.train.channels = 1;
  s.train.height = 1;
  s.train.width = 2;
  for (int64_t i = 0; i < n; ++i) {
    s.train.pixels.push_back(static_cast<uint8_t>(i & 255));
    s.train.pixels.push_back(static_cast<uint8_t>(i >> 8));
    s.train.labels.push_back(static_cast<int32_t>((i * i) % classes));
  }
  for (int64_t c = 0; c < classes; ++c) s.class_names.push_back("c" + std::to_string(c));
  return s;
}

std::vector<int64_t> ids(const Dataset& d) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < d.size(); ++i) out.push_back(d.sample(i)[0] | (d.sample(i)[1] << 8));
  return out;
}

}  // namespace

TEST_CASE("val carving is deterministic, disjoint, complete and stratified", "[cpu]") {
  DataSplits a = traceable(1000, 7), b = traceable(1000, 7), c = traceable(1000, 7);
  std::vector<int64_t> before = class_histogram(a.train, 7);
  carve_val(a, 0.2, 99);
  carve_val(b, 0.2, 99);
  carve_val(c, 0.2, 100);
  CHECK(ids(a.val) == ids(b.val));
  CHECK(ids(a.train) == ids(b.train));
  CHECK(ids(a.val) != ids(c.val));
  CHECK(a.val.size() == 200);
  CHECK(a.train.size() == 800);
  std::vector<int64_t> all = ids(a.train);
  std::vector<int64_t> v = ids(a.val);
  all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(all[static_cast<size_t>(i)] == i);
  std::vector<int64_t> hv = class_histogram(a.val, 7);
  for (int k = 0; k < 7; ++k) CHECK(std::abs(static_cast<double>(hv[k]) - 0.2 * before[k]) < 1.0);
  // Both parts keep the source order; labels move with their images.
  CHECK(std::is_sorted(v.begin(), v.end()));
  for (int64_t i = 0; i < a.val.size(); ++i) REQUIRE(a.val.labels[i] == (v[i] * v[i]) % 7);
  CHECK(a.notes.back().find("carved 200 of 1000 train images (val_split 0.2, stratified by class, split_seed 99)") !=
        std::string::npos);
  DataSplits d = traceable(10, 2);
  CHECK_THROWS_AS(carve_val(d, 1.0, 1), ConfigError);
}

TEST_CASE("class histogram table lists every class and the totals", "[cpu]") {
  DataSplits s = traceable(30, 3);
  carve_val(s, 0.1, 1);
  std::string t = class_histogram_table(s);
  INFO(t);
  CHECK(t.find("class") == 0);
  CHECK(t.find("c2") != std::string::npos);
  CHECK(t.find("total        27         3         0") != std::string::npos);
  Dataset bad = s.train;
  bad.labels[0] = 5;
  CHECK_THROWS_AS(class_histogram(bad, 3), Error);
}

TEST_CASE("fingerprints change with labels and pixels of any split", "[cpu]") {
  DataSplits s = traceable(50, 5);
  std::string f0 = dataset_fingerprint(s);
  CHECK(f0.find("train=50:") == 0);
  CHECK(f0.find(";val=0:") != std::string::npos);
  CHECK(dataset_fingerprint(s) == f0);
  s.train.labels[3] = (s.train.labels[3] + 1) % 5;
  std::string f1 = dataset_fingerprint(s);
  CHECK(f1 != f0);
  s.train.pixels[10] ^= 1;
  CHECK(dataset_fingerprint(s) != f1);
}

TEST_CASE("convert_image resizes bilinearly and converts channels", "[cpu]") {
  // 1x2 -> 1x4 with centre alignment: samples at x = -0.25, 0.25, 0.75, 1.25 of [0, 200].
  const uint8_t src[2] = {0, 200};
  uint8_t dst[4];
  convert_image(src, 1, 1, 2, dst, 1, 1, 4);
  CHECK(std::vector<uint8_t>(dst, dst + 4) == std::vector<uint8_t>{0, 50, 150, 200});
  // RGB -> gray by luma, gray -> RGB by copying.
  const uint8_t rgb[3] = {100, 200, 50};
  uint8_t g;
  convert_image(rgb, 3, 1, 1, &g, 1, 1, 1);
  CHECK(g == static_cast<uint8_t>(std::lround(0.299 * 100 + 0.587 * 200 + 0.114 * 50)));
  uint8_t three[3];
  convert_image(&g, 1, 1, 1, three, 3, 1, 1);
  CHECK((three[0] == g && three[1] == g && three[2] == g));
  // 4x4 -> 2x2 averages 2x2 blocks (samples at the block centres).
  const uint8_t big[16] = {0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150};
  uint8_t small[4];
  convert_image(big, 1, 4, 4, small, 1, 2, 2);
  CHECK(std::vector<uint8_t>(small, small + 4) == std::vector<uint8_t>{25, 45, 105, 125});
}

TEST_CASE("synthetic faces are reproducible, balanced and differ by class", "[cpu]") {
  Dataset a = make_synthetic_faces(70, 7, 1, 48, 48, 5), b = make_synthetic_faces(70, 7, 1, 48, 48, 5);
  Dataset c = make_synthetic_faces(70, 7, 1, 48, 48, 6);
  CHECK(a.pixels == b.pixels);
  CHECK(a.labels == b.labels);
  CHECK(a.pixels != c.pixels);
  CHECK(class_histogram(a, 7) == std::vector<int64_t>(7, 10));
  // Learnable: a nearest-centroid classifier on standardised pixels beats chance (1/7) by far on
  // fresh images; not trivial: it stays well short of perfect.
  Dataset train = make_synthetic_faces(1400, 7, 1, 48, 48, 11), test = make_synthetic_faces(350, 7, 1, 48, 48, 12);
  auto standardised = [](const Dataset& d, int64_t i) {
    std::vector<double> v(d.sample(i), d.sample(i) + 2304);
    double m = 0, s2 = 0;
    for (double x : v) m += x / 2304;
    for (double x : v) s2 += (x - m) * (x - m) / 2304;
    for (double& x : v) x = (x - m) / std::sqrt(s2 + 1e-9);
    return v;
  };
  std::vector<std::vector<double>> centroid(7, std::vector<double>(2304, 0.0));
  for (int64_t i = 0; i < train.size(); ++i) {
    auto v = standardised(train, i);
    for (int j = 0; j < 2304; ++j) centroid[train.labels[i]][j] += v[j];
  }
  int correct = 0;
  for (int64_t i = 0; i < test.size(); ++i) {
    auto v = standardised(test, i);
    int best = 0;
    double best_d = 1e300;
    for (int k = 0; k < 7; ++k) {
      double n2 = 0, dot = 0;
      for (int j = 0; j < 2304; ++j) n2 += centroid[k][j] * centroid[k][j], dot += centroid[k][j] * v[j];
      double d = -dot / std::sqrt(n2);
      if (d < best_d) best_d = d, best = k;
    }
    correct += best == test.labels[i];
  }
  double acc = static_cast<double>(correct) / test.size();
  INFO("nearest-centroid accuracy " << acc);
  CHECK(acc > 0.35);
  CHECK(acc < 0.95);
  // Images are not blank and use a good part of the range.
  auto [lo, hi] = std::minmax_element(a.pixels.begin(), a.pixels.end());
  CHECK(*hi - *lo > 150);
  Dataset rgb = make_synthetic_faces(20, 10, 3, 16, 20, 1);
  CHECK(rgb.pixels.size() == 20 * 3 * 16 * 20);
  CHECK(rgb.labels[13] == 3);
}

TEST_CASE("load_dataset makes synthetic splits and rejects unknown formats", "[cpu]") {
  DataSpec spec;
  spec.format = "synthetic";
  spec.synthetic_size = 40;
  DataSplits s = load_dataset(spec, InputSpec{1, 32, 32}, {});
  CHECK(s.train.size() == 40);
  CHECK(s.val.size() == 10);
  CHECK(s.test.size() == 10);
  CHECK(s.train.height == 32);
  CHECK(s.class_names.size() == 7);
  CHECK(ids(s.val) != ids(s.test));
  spec.format = "fer2031-csv";
  std::string msg = error_of([&] { load_dataset(spec, InputSpec{1, 32, 32}, {}); });
  CHECK(msg.find("did you mean 'fer2013-csv'?") != std::string::npos);
  spec.format = "synthetic";
  spec.on_bad_row = "ignore";
  CHECK_THROWS_AS(load_dataset(spec, InputSpec{1, 32, 32}, {}), ConfigError);
}

TEST_CASE("a synthetic input size that overflows is an error, not a wrapped allocation", "[cpu]") {
  DataSpec spec;
  spec.format = "synthetic";
  spec.synthetic_size = 8;
  const int64_t big = int64_t{1} << 32;  // height x width = 2^64 wraps to 0 in size_t
  for (InputSpec input : {InputSpec{1, big, big}, InputSpec{3, 9000, 9000}, InputSpec{1, big, 1}}) {
    INFO(input.height << "x" << input.width);
    try {
      load_dataset(spec, input, {});
      FAIL("no error");
    } catch (const ConfigError& e) {
      CHECK(e.key_path() == "input");
      CHECK(std::string(e.what()).find("above the data loaders' limit of 67108864") != std::string::npos);
    }
  }
  CHECK(error_of([&] { make_synthetic_faces(4, 7, 1, big, big, 1); }).find("synthetic data: 4 images of "
                                                                              "1x4294967296x4294967296 exceed") !=
        std::string::npos);
  CHECK(error_of([&] { make_synthetic_faces(int64_t{1} << 62, 7, 1, 48, 48, 1); }).find("exceed the limits") !=
        std::string::npos);
  spec.synthetic_size = int64_t{1} << 40;
  CHECK(error_of([&] { load_dataset(spec, InputSpec{1, 48, 48}, {}); }).find("exceed the limits") != std::string::npos);
}

TEST_CASE("an exception inside a data OpenMP loop is rethrown after it, not an abort", "[cpu]") {
  Dataset d = cnn::test::patterned_dataset(64, 2, 3, 3, 2);  // 2 channels: convert_image refuses 2 -> 3
  CHECK(error_of([&] { convert_dataset(d, 3, 4, 4); }).find("cannot convert 2 channels to 3") != std::string::npos);
  // Four threads walking their iterations downwards: the first failure in time is a high one.
  ParallelErrors errors;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&errors, t] {
      for (int64_t i = 99 - t; i >= 0; i -= 4) {
        errors.run(i, [&] {
          if (i % 10 == 7) throw Error("iteration " + std::to_string(i));
        });
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(error_of([&] { errors.rethrow(); }) == "iteration 7");  // the lowest failing one, on any schedule
}

TEST_CASE("load_dataset of a model file names the file in its config errors", "[cpu]") {
  ModelSpec model;
  model.file = "models/two_channels.yaml";
  model.input = InputSpec{2, 8, 8};
  model.data.format = "synthetic";
  try {
    load_dataset(model, {});
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(e.where().file == "models/two_channels.yaml");
    CHECK(std::string(e.what()).find("models/two_channels.yaml: 'input.channels': data loaders read 1 (gray) or 3") ==
          0);
  }
}
