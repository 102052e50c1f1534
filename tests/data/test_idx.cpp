#include <sys/stat.h>

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

using cnn::test::write_idx_set;

TEST_CASE("idx files are read plain and gzipped with exact pixels and labels", "[cpu]") {
  for (bool gz : {false, true}) {
    INFO("gz " << gz);
    cnn::test::TempDir dir;
    write_idx_set(dir.path(), 12, 5, 4, 3, gz);
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
  write_idx_set(dir.path(), 6, 3, 2, 2, false);
  const std::string labels = (dir / "t10k-labels-idx1-ubyte").string();
  SECTION("bad magic") {
    auto bytes = idx_file_bytes(std::vector<uint8_t>(3 * 4, 1), 3, 2, 2);  // images where labels belong
    write_file_bytes(labels, bytes.data(), bytes.size());
    std::string msg = error_of([&] { load_idx(dir.path().string()); });
    CHECK(msg.find(labels + ": bad magic number 0x00000803 at byte 0, expected 0x00000801") != std::string::npos);
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

namespace {

// An idx header (magic, then big-endian dimensions) followed by `payload` bytes.
std::string idx_header(uint32_t magic, const std::vector<uint32_t>& dims, size_t payload = 0) {
  std::string out;
  auto put = [&](uint32_t v) {
    for (int sh = 24; sh >= 0; sh -= 8) out += static_cast<char>((v >> sh) & 0xff);
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  return out + std::string(payload, '\x07');
}

}  // namespace

TEST_CASE("idx headers with huge dimensions are errors naming the file and field, before any allocation", "[cpu]") {
  cnn::test::TempDir dir;
  write_idx_set(dir.path(), 6, 3, 2, 2, false);
  const std::string images = (dir / "train-images-idx3-ubyte").string();
  const std::string labels = (dir / "train-labels-idx1-ubyte").string();
  struct Case {
    std::vector<uint32_t> dims;
    std::string expect;
  };
  const std::vector<Case> cases{
      // 2^16 * 2^24 * 2^24 = 2^64: wraps to 0 in size_t, and a 16-byte file "matches" it.
      {{65536, 1u << 24, 1u << 24}, "header field 'rows' (byte 8): 65536 x 16777216 = 1099511627776 values, more "
                                    "than the limit"},
      {{4294967295u, 4294967295u, 4294967295u}, "header field 'number of images' (byte 4)"},
      {{1, 10000, 10000}, "header fields 'rows' x 'columns' (bytes 8-15) declare images of 10000 x 10000 pixels"},
      {{1 << 30, 1, 1}, "header field 'number of images' (byte 4): 1073741824 = 1073741824 values, more than"},
      {{3, 0, 4}, "header field 'rows' (byte 8) is 0"},
  };
  for (const Case& c : cases) {
    cnn::test::write_text_file(images, idx_header(0x803, c.dims));
    const std::string msg = error_of([&] { load_idx(dir.path().string()); });
    INFO(msg);
    CHECK(msg.find(images + ": " + c.expect) != std::string::npos);
  }
  cnn::test::write_text_file(images, idx_header(0x803, {65536, 1u << 24, 1u << 24}));
  cnn::test::write_text_file(labels, idx_header(0x801, {65536}, 65536));
  DataSpec spec;
  spec.format = "idx";
  spec.path = dir.path().string();
  CHECK(error_of([&] { load_dataset(spec, InputSpec{1, 8, 8}, {}); }).find(images + ": header field") !=
        std::string::npos);
  write_idx_set(dir.path(), 6, 3, 2, 2, false);
  cnn::test::write_text_file(labels, idx_header(0x801, {4294967295u}));
  CHECK(error_of([&] { load_idx(dir.path().string()); }).find(labels + ": header field 'number of labels' (byte 4)") !=
        std::string::npos);
}

TEST_CASE("an idx .gz without its trailer or with more bytes than its header says is an error", "[cpu]") {
  cnn::test::TempDir dir;
  write_idx_set(dir.path(), 6, 3, 2, 2, true);
  const std::string labels = (dir / "t10k-labels-idx1-ubyte.gz").string();
  std::string gz = cnn::test::read_text_file(labels);
  cnn::test::write_text_file(labels, gz.substr(0, gz.size() - 8));
  CHECK(error_of([&] { load_idx(dir.path().string()); }).find(labels + ": truncated gzip data") != std::string::npos);
  const std::string more = idx_header(0x801, {3}, 4);  // one value more than announced
  const std::vector<uint8_t> bytes(more.begin(), more.end());
  write_gzip_file(labels, bytes.data(), bytes.size());
  CHECK(error_of([&] { load_idx(dir.path().string()); }).find(labels + ": header says 3 values (3), the file holds "
                                                               "more than 3") != std::string::npos);
  std::vector<int64_t> dims;
  CHECK(parse_idx("x", bytes.data(), bytes.size() - 1, false, dims) == std::vector<uint8_t>{7, 7, 7});
  CHECK(dims == std::vector<int64_t>{3});
}

TEST_CASE("a FIFO in place of an idx file is refused by name without blocking", "[cpu]") {
  cnn::test::TempDir dir;
  write_idx_set(dir.path(), 6, 3, 2, 2, false);
  const std::string images = (dir / "train-images-idx3-ubyte").string();
  std::filesystem::remove(images);
  REQUIRE(mkfifo(images.c_str(), 0600) == 0);
  CHECK(error_of([&] { load_idx(dir.path().string()); }).find(images + ": is a FIFO") != std::string::npos);
}

TEST_CASE("load_dataset on idx carves val, names classes and upsamples to the input", "[cpu]") {
  cnn::test::TempDir dir;
  write_idx_set(dir.path(), 100, 20, 4, 4, true);
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

TEST_CASE("idx files decoded on parallel threads equal a one-file-at-a-time read, errors in that order", "[cpu]") {
  cnn::test::TempDir dir;
  write_idx_set(dir.path(), 300, 70, 9, 7, true);
  const DataSplits s = load_idx(dir.path().string());
  // The reference: each file read and parsed on this thread.
  auto values = [&](const std::string& name, bool images) {
    const std::string path = (dir / (name + ".gz")).string();
    const std::vector<uint8_t> bytes = read_file_bytes(path);
    std::vector<int64_t> dims;
    return parse_idx(path, bytes.data(), bytes.size(), images, dims);
  };
  CHECK(s.train.pixels == values("train-images-idx3-ubyte", true));
  CHECK(s.test.pixels == values("t10k-images-idx3-ubyte", true));
  const std::vector<uint8_t> train_labels = values("train-labels-idx1-ubyte", false);
  CHECK(s.train.labels == std::vector<int32_t>(train_labels.begin(), train_labels.end()));
  const std::vector<uint8_t> test_labels = values("t10k-labels-idx1-ubyte", false);
  CHECK(s.test.labels == std::vector<int32_t>(test_labels.begin(), test_labels.end()));

  // Several files wrong at once: the message is the one a sequential read meets first (train
  // before t10k; both files found before either is read; images before labels), every time.
  const std::string train_images = (dir / "train-images-idx3-ubyte.gz").string();
  const std::string test_labels_path = (dir / "t10k-labels-idx1-ubyte.gz").string();
  const std::string train_labels_path = (dir / "train-labels-idx1-ubyte.gz").string();
  const std::string gz = cnn::test::read_text_file(train_images);
  cnn::test::write_text_file(train_images, gz.substr(0, gz.size() / 2));  // truncated
  std::filesystem::remove(test_labels_path);
  for (int run = 0; run < 3; ++run) {
    CHECK(error_of([&] { load_idx(dir.path().string()); }).find(train_images + ": truncated gzip data") !=
          std::string::npos);
  }
  std::filesystem::remove(train_labels_path);  // now missing, found before the images are read
  CHECK(error_of([&] { load_idx(dir.path().string()); })
            .find("neither train-labels-idx1-ubyte nor train-labels-idx1-ubyte.gz exists") != std::string::npos);
}
