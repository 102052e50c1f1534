#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/dataset.h"
#include "data/sources.h"
#include "data/gzip.h"
#include "data_test_util.h"
#include "gzip_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using cnn::test::error_of;

namespace {

std::vector<uint8_t> row_pixels(int seed) {
  std::vector<uint8_t> p(2304);
  for (int j = 0; j < 2304; ++j) p[j] = static_cast<uint8_t>((j * 7 + seed * 13) % 256);
  return p;
}

// Header + rows (label, usage) with row_pixels(i) pixels.
std::string csv_text(const std::vector<std::pair<int, std::string>>& rows, bool usage_column = true) {
  std::string s = usage_column ? "emotion,pixels,Usage\n" : "emotion,pixels\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    auto p = row_pixels(static_cast<int>(i));
    s += fer2013_csv_row(rows[i].first, p.data(), 2304, usage_column ? rows[i].second : "") + "\n";
  }
  return s;
}

DataSpec fer_spec(const std::string& path) {
  DataSpec spec;
  spec.format = "fer2013-csv";
  spec.path = path;
  return spec;
}

}  // namespace

TEST_CASE("fer2013 csv rows go to the split their Usage names with exact pixels", "[cpu]") {
  cnn::test::TempDir dir;
  const std::string path = (dir / "fer.csv").string();
  cnn::test::write_text_file(path, csv_text({{3, "Training"}, {0, "PublicTest"}, {6, "Training"}, {5, "PrivateTest"},
                                             {1, "Training"}}));
  DataSplits s = load_fer2013_csv(path, 7, false);
  REQUIRE(s.train.size() == 3);
  REQUIRE(s.val.size() == 1);
  REQUIRE(s.test.size() == 1);
  CHECK(s.train.labels == std::vector<int32_t>{3, 6, 1});
  CHECK(s.val.labels == std::vector<int32_t>{0});
  CHECK(s.test.labels == std::vector<int32_t>{5});
  CHECK(s.train.height == 48);
  CHECK(s.train.channels == 1);
  // Row 2 (0-based, the second Training row) has row_pixels(2).
  std::vector<uint8_t> second(s.train.sample(1), s.train.sample(1) + 2304);
  CHECK(second == row_pixels(2));
  std::vector<uint8_t> test0(s.test.sample(0), s.test.sample(0) + 2304);
  CHECK(test0 == row_pixels(3));
  CHECK(s.bad_skipped == 0);
}

TEST_CASE("fer2013 csv parses a hand-written row with CRLF, quotes and extra spaces", "[cpu]") {
  cnn::test::TempDir dir;
  std::string pixels;
  for (int j = 0; j < 2304; ++j) pixels += (j ? " " : "") + std::to_string(j == 0 ? 255 : j == 1 ? 0 : j % 200);
  cnn::test::write_text_file(dir / "f.csv", "emotion,pixels,Usage\r\n4,\"  " + pixels + " \",PrivateTest\r\n\r\n");
  DataSplits s = load_fer2013_csv((dir / "f.csv").string(), 7, false);
  REQUIRE(s.test.size() == 1);
  CHECK(s.test.labels[0] == 4);
  CHECK(s.test.pixels[0] == 255);
  CHECK(s.test.pixels[1] == 0);
  CHECK(s.test.pixels[2] == 2);
  CHECK(s.test.pixels[2303] == 2303 % 200);
}

TEST_CASE("each malformed fer2013 row kind is an error naming the line and field", "[cpu]") {
  cnn::test::TempDir dir;
  std::string good = csv_text({{2, "Training"}});
  good = good.substr(good.find('\n') + 1);  // one good row, without header
  std::string good_pixels = good.substr(2, good.rfind(',') - 2);
  // The pixels after the third value, starting with the space before the fourth.
  size_t third = good_pixels.find(' ', good_pixels.find(' ', good_pixels.find(' ') + 1) + 1);
  std::string rest = good_pixels.substr(third);
  struct Case {
    std::string row, expect;
  };
  const std::vector<Case> cases{
      {"3," + good_pixels, "expected 3 fields"},
      {"3," + good_pixels + ",Training,extra", "expected 3 fields"},
      {"3,1 2 x3" + rest + ",Training", "value 3 'x3' is not an integer"},
      {"3,1 2 256" + rest + ",Training", "value 3 is 256, above 255"},
      {"3,1 2 -4" + rest + ",Training", "is not an integer"},
      {"3," + good_pixels + " 7,Training", "2305 values, expected 2304"},
      {"3,1 2 3,Training", "3 values, expected 2304"},
      {"7," + good_pixels + ",Training", "field 'emotion' (column 1): 7 is outside [0, 7)"},
      {"x," + good_pixels + ",Training", "field 'emotion' (column 1): 'x' is not a class index"},
      {"3," + good_pixels + ",Validation", "'Validation' is not Training, PublicTest or PrivateTest"},
  };
  for (const Case& c : cases) {
    const std::string path = (dir / "bad.csv").string();
    cnn::test::write_text_file(path, "emotion,pixels,Usage\n" + good + good + c.row + "\n" + good);
    std::string msg = error_of([&] { load_fer2013_csv(path, 7, false); });
    INFO(msg);
    CHECK(msg.find(path + ":4: ") != std::string::npos);
    CHECK(msg.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("the pixel error names the column where the bad value starts", "[cpu]") {
  cnn::test::TempDir dir;
  std::string pixels = "10 20 300";
  for (int j = 3; j < 2304; ++j) pixels += " 1";
  cnn::test::write_text_file(dir / "c.csv", "emotion,pixels,Usage\n0," + pixels + ",Training\n");
  std::string msg = error_of([&] { load_fer2013_csv((dir / "c.csv").string(), 7, false); });
  // "0," is columns 1-2, "10 20 " columns 3-8, so 300 starts at column 9.
  CHECK(msg.find(":2: field 'pixels' (column 9): value 3 is 300") != std::string::npos);
}

TEST_CASE("fer2013 skip mode drops malformed rows, counts them and lists their lines", "[cpu]") {
  cnn::test::TempDir dir;
  std::string text = csv_text({{1, "Training"}, {2, "Training"}, {3, "PublicTest"}});
  text += "9,1 2 3,Training\n";     // line 5
  text += "1,1 2 3\n";              // line 6
  text += csv_text({{4, "PrivateTest"}}).substr(21);
  const std::string path = (dir / "skip.csv").string();
  cnn::test::write_text_file(path, text);
  CHECK_THROWS_AS(load_fer2013_csv(path, 7, false), Error);
  DataSplits s = load_fer2013_csv(path, 7, true);
  CHECK(s.bad_skipped == 2);
  CHECK(s.train.size() == 2);
  CHECK(s.val.size() == 1);
  CHECK(s.test.size() == 1);
  CHECK(s.test.labels[0] == 4);
  bool listed = false;
  for (const auto& n : s.notes) listed = listed || n.find("skipped 2 malformed rows (on_bad_row: skip), lines 5, 6") != std::string::npos;
  CHECK(listed);
}

TEST_CASE("fer2013 header problems are errors on line 1", "[cpu]") {
  cnn::test::TempDir dir;
  cnn::test::write_text_file(dir / "h.csv", "emotion,pixel,Usage\n");
  std::string msg = error_of([&] { load_fer2013_csv((dir / "h.csv").string(), 7, false); });
  CHECK(msg.find("h.csv:1: header") != std::string::npos);
  CHECK(msg.find("unexpected column 'pixel'") != std::string::npos);
  cnn::test::write_text_file(dir / "e.csv", "");
  CHECK(error_of([&] { load_fer2013_csv((dir / "e.csv").string(), 7, false); }).find("empty file") != std::string::npos);
}

TEST_CASE("a missing fer2013 csv names the absolute path, the working directory and the README", "[cpu]") {
  const std::string rel = "no-such-folder/fer2013.csv";
  const std::string msg = error_of([&] { load_fer2013_csv(rel, 7, false); });
  INFO(msg);
  CHECK(msg.find(rel + ": no such file (looked at " + std::filesystem::absolute(rel).string()) != std::string::npos);
  CHECK(msg.find("a relative path is relative to the working directory, " +
                 std::filesystem::current_path().string()) != std::string::npos);
  CHECK(msg.find("datasets/fer2013/README.md") != std::string::npos);
  CHECK(msg.find("cnn-make-fer2013") != std::string::npos);
}

TEST_CASE("a gzip fer2013 csv cut at a row boundary is an error, not fewer rows", "[cpu]") {
  cnn::test::TempDir dir;
  std::vector<std::string> rows{"emotion,pixels,Usage\n"};
  for (int i = 0; i < 88; ++i) {
    auto p = row_pixels(i);
    rows.push_back(fer2013_csv_row(i % 7, p.data(), 2304, "Training") + "\n");
  }
  const std::string path = (dir / "fer.csv.gz").string();
  cnn::test::write_text_file(path, cnn::test::gzip_stored(rows, true));
  REQUIRE(load_fer2013_csv(path, 7, false).train.size() == 88);
  // The first 40 rows in whole deflate blocks, then the end of the file: they parse cleanly.
  cnn::test::write_text_file(path, cnn::test::gzip_stored({rows.begin(), rows.begin() + 41}, false));
  const std::string msg = error_of([&] { load_fer2013_csv(path, 7, false); });
  CHECK(msg.find(path + ": truncated gzip data") != std::string::npos);
  CHECK(error_of([&] { load_dataset(fer_spec(path), InputSpec{1, 48, 48}, {}); }).find("truncated") !=
        std::string::npos);
}

TEST_CASE("a FIFO as the fer2013 path is refused without blocking", "[cpu]") {
  cnn::test::TempDir dir;
  const std::string fifo = (dir / "fer.csv").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(error_of([&] { load_fer2013_csv(fifo, 7, false); }).find(fifo + ": is a FIFO") != std::string::npos);
}

TEST_CASE("fer2013 line numbers stay right across parse blocks of thousands of lines", "[cpu]") {
  cnn::test::TempDir dir;
  std::string good = csv_text({{2, "Training"}});
  good = good.substr(good.find('\n') + 1);
  const std::string path = (dir / "long.csv").string();
  // Line 1 header, lines 2..4101 blank (spaces: parsed, in the first block), 4102 good, 4103 bad, 4104 good.
  std::string blanks;
  for (int i = 0; i < 4100; ++i) blanks += " \n";
  cnn::test::write_text_file(path, "emotion,pixels,Usage\n" + blanks + good + "9,1 2,Training\n" + good);
  CHECK(error_of([&] { load_fer2013_csv(path, 7, false); }).find(path + ":4103: field 'emotion'") !=
        std::string::npos);
  DataSplits s = load_fer2013_csv(path, 7, true);
  CHECK(s.train.size() == 2);
  CHECK(s.bad_skipped == 1);
}

TEST_CASE("fer2013 bounded: millions of blank lines in bounded memory", "[.][bounded]") {
  cnn::test::TempDir dir;
  std::string good = csv_text({{2, "Training"}});
  const std::string path = (dir / "blank.csv").string();
  // 2M lines: a reader that sizes its pixel buffer by the line count asks for 4.8 GB here.
  cnn::test::write_text_file(path, good.substr(0, good.find('\n') + 1) + std::string(size_t{2} << 20, '\n') +
                                       good.substr(good.find('\n') + 1));
  DataSplits s = load_fer2013_csv(path, 7, false);
  CHECK(s.train.size() == 1);
}

TEST_CASE("a fer2013 csv of millions of blank lines loads within a 3 GiB address space", "[cpu]") {
  CHECK(cnn::test::passes_bounded("fer2013 bounded: millions of blank lines in bounded memory", 3072, 60));
}

TEST_CASE("fer2013 without a Usage column is all train, and load_dataset carves val from it", "[cpu]") {
  cnn::test::TempDir dir;
  std::vector<std::pair<int, std::string>> rows;
  for (int i = 0; i < 40; ++i) rows.push_back({i % 4, ""});
  const std::string path = (dir / "two.csv").string();
  cnn::test::write_text_file(path, csv_text(rows, false));
  DataSpec spec = fer_spec(path);
  spec.val_split = 0.25;
  InputSpec input{1, 48, 48};
  DataSplits s = load_dataset(spec, input, {"a", "b", "c", "d"});
  CHECK(s.train.size() == 30);
  CHECK(s.val.size() == 10);
  CHECK(s.test.size() == 0);
  CHECK(class_histogram(s.val, 4) == std::vector<int64_t>{3, 3, 2, 2});  // 2.5 each, remainder to the first
  CHECK(s.fingerprint.find("train=30:") == 0);
}

TEST_CASE("load_dataset resizes fer2013 to the model input and replicates channels", "[cpu]") {
  cnn::test::TempDir dir;
  const std::string path = (dir / "f.csv").string();
  std::string pixels;
  for (int j = 0; j < 2304; ++j) pixels += (j ? " " : "") + std::string("100");
  cnn::test::write_text_file(path, "emotion,pixels,Usage\n1," + pixels + ",Training\n2," + pixels + ",PublicTest\n");
  DataSplits s = load_dataset(fer_spec(path), InputSpec{3, 24, 40}, {});
  REQUIRE(s.train.size() == 1);
  CHECK(s.train.channels == 3);
  CHECK(s.train.height == 24);
  CHECK(s.train.width == 40);
  CHECK(s.train.pixels.size() == 3 * 24 * 40);
  for (uint8_t v : s.train.pixels) REQUIRE(v == 100);
  CHECK(s.class_names.size() == 7);
  CHECK(s.class_names[3] == "happy");
}

TEST_CASE("fer2013 csv parse throughput", "[.][bench]") {
  // Set CNN_FER2013_CSV to time a real (or cnn-make-fer2013 full-size) file; else a generated one.
  const char* env = std::getenv("CNN_FER2013_CSV");
  cnn::test::TempDir dir;
  std::string path = env ? env : (dir / "bench.csv").string();
  if (!env) {
    std::vector<std::pair<int, std::string>> rows(4000, {3, "Training"});
    cnn::test::write_text_file(path, csv_text(rows));
  }
  auto t0 = std::chrono::steady_clock::now();
  DataSplits s = load_fer2013_csv(path, 7, false);
  double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;
  std::cout << "fer2013 csv: " << mb << " MB, " << s.train.size() + s.val.size() + s.test.size() << " rows in "
            << sec << " s = " << mb / sec << " MB/s\n";
  CHECK(s.train.size() > 0);
  t0 = std::chrono::steady_clock::now();
  DataSplits full = load_dataset(fer_spec(path), InputSpec{1, 48, 48}, {});
  sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "load_dataset (parse, carve if needed, fingerprint): " << sec << " s\n" << class_histogram_table(full);
}
