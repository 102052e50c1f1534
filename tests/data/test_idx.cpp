#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"
#include "data/gzip.h"
#include "data/sources.h"
#include "data_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using cnn::test::error_of;

namespace {

// Writes train (n_train) and t10k (n_test) files of h x w images; pixel j of image i is (i*31+j)%256.
void write_idx_set(const cnn::test::TempDir& dir, int64_t n_train, int64_t n_test, int64_t h, int64_t w, bool gz) {
  for (auto [prefix, n] : {std::pair<std::string, int64_t>{"train", n_train}, {"t10k", n_test}}) {
    std::vector<uint8_t> images, labels;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < h * w; ++j) images.push_back(static_cast<uint8_t>((i * 31 + j) % 256));
      labels.push_back(static_cast<uint8_t>(i % 10));
    }
    auto ib = idx_file_bytes(images, n, h, w), lb = idx_file_bytes(labels, n, 0, 0);
    std::string ip = (dir / (prefix + "-images-idx3-ubyte")).string(), lp = (dir / (prefix + "-labels-idx1-ubyte")).string();
    if (gz) {
      write_gzip_file(ip + ".gz", ib.data(), ib.size());
      write_gzip_file(lp + ".gz", lb.data(), lb.size());
    } else {
      write_file_bytes(ip, ib.data(), ib.size());
      write_file_bytes(lp, lb.data(), lb.size());
    }
  }
}

}  // namespace

TEST_CASE("idx files are read plain and gzipped with exact pixels and labels", "[cpu]") {
  for (bool gz : {false, true}) {
    INFO("gz " << gz);
    cnn::test::TempDir dir;
    write_idx_set(dir, 12, 5, 4, 3, gz);
    DataSplits s = load_idx(dir.path().string());
    REQUIRE(s.train.size() == 12);
    REQUIRE(s.test.size() == 5);
    CHECK(s.val.size() == 0);
    CHECK(s.train.height == 4);
    CHECK(s.train.width == 3);
    CHECK(s.train.labels[11] == 1);
    CHECK(s.test.labels[4] == 4);
    CHECK(s.train.sample(7)[5] == (7 * 31 + 5) % 256);
    CHECK(s.test.sample(2)[11] == (2 * 31 + 11) % 256);
    CHECK(s.notes[0].find(gz ? "train-images-idx3-ubyte.gz" : "train-images-idx3-ubyte ") != std::string::npos);
  }
}

TEST_CASE("gzip helper round-trips bytes and read_file_bytes passes plain files through", "[cpu]") {
  cnn::test::TempDir dir;
  std::vector<uint8_t> data(100000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * i % 251);
  write_gzip_file((dir / "a.gz").string(), data.data(), data.size());
  write_file_bytes((dir / "a.bin").string(), data.data(), data.size());
  CHECK(read_file_bytes((dir / "a.gz").string()) == data);
  CHECK(read_file_bytes((dir / "a.bin").string()) == data);
}

TEST_CASE("idx errors name the file and what is wrong", "[cpu]") {
  cnn::test::TempDir dir;
  write_idx_set(dir, 6, 3, 2, 2, false);
  const std::string labels = (dir / "t10k-labels-idx1-ubyte").string();
  SECTION("bad magic") {
    auto bytes = idx_file_bytes(std::vector<uint8_t>(3 * 4, 1), 3, 2, 2);  // images where labels belong
    write_file_bytes(labels, bytes.data(), bytes.size());
    std::string msg = error_of([&] { load_idx(dir.path().string()); });
    CHECK(msg.find(labels + ": bad magic number 0x00000803, expected 0x00000801") != std::string::npos);
  }
  SECTION("truncated data") {
    auto bytes = idx_file_bytes({1, 2, 3}, 3, 0, 0);
    bytes.pop_back();
    write_file_bytes(labels, bytes.data(), bytes.size());
    std::string msg = error_of([&] { load_idx(dir.path().string()); });
    CHECK(msg.find(labels + ": header says 3 values (3), the file holds 2") != std::string::npos);
  }
  SECTION("count mismatch between images and labels") {
    auto bytes = idx_file_bytes({1, 2}, 2, 0, 0);
    write_file_bytes(labels, bytes.data(), bytes.size());
    std::string msg = error_of([&] { load_idx(dir.path().string()); });
    CHECK(msg.find("holds 3 images but " + labels + " holds 2 labels") != std::string::npos);
  }
  SECTION("missing file") {
    std::filesystem::remove(labels);
    std::string msg = error_of([&] { load_idx(dir.path().string()); });
    CHECK(msg.find("neither t10k-labels-idx1-ubyte nor t10k-labels-idx1-ubyte.gz exists") != std::string::npos);
  }
  SECTION("too short for a header") {
    write_file_bytes(labels, "\0\0", 2);
    CHECK(error_of([&] { load_idx(dir.path().string()); }).find("too short") != std::string::npos);
  }
}

TEST_CASE("load_dataset on idx carves val, names classes and upsamples to the input", "[cpu]") {
  cnn::test::TempDir dir;
  write_idx_set(dir, 100, 20, 4, 4, true);
  DataSpec spec;
  spec.format = "idx";
  spec.path = dir.path().string();
  DataSplits s = load_dataset(spec, InputSpec{1, 8, 8}, {});
  CHECK(s.train.size() == 90);
  CHECK(s.val.size() == 10);
  CHECK(s.test.size() == 20);
  CHECK(s.class_names.size() == 10);
  CHECK(s.class_names[9] == "class9");
  CHECK(s.train.height == 8);
  CHECK(class_histogram(s.val, 10) == std::vector<int64_t>(10, 1));
  std::string msg = error_of([&] { load_dataset(spec, InputSpec{1, 8, 8}, {"a", "b"}); });
  CHECK(msg.find("labels go up to 9 but the model has 2 classes") != std::string::npos);
}

TEST_CASE("the Debian Fashion-MNIST package loads as idx with the expected splits", "[cpu]") {
  const std::string path = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(path + "/train-images-idx3-ubyte.gz")) {
    CNN_SKIP("dataset-fashion-mnist is not installed");
  }
  DataSpec spec;
  spec.format = "idx";
  spec.path = path;
  DataSplits s = load_dataset(spec, InputSpec{1, 28, 28}, {});
  CHECK(s.train.size() == 54000);
  CHECK(s.val.size() == 6000);
  CHECK(s.test.size() == 10000);
  CHECK(class_histogram(s.test, 10) == std::vector<int64_t>(10, 1000));
  CHECK(class_histogram(s.val, 10) == std::vector<int64_t>(10, 600));
  CHECK(s.fingerprint.find("train=54000:") == 0);
}
