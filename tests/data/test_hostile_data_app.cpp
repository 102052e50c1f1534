// Hostile data through the real cnn-train (when it is built): each input, made here, must end in
// exit 1 or 2 with an error naming the file, within seconds and a 4 GiB address space.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "data/gzip.h"
#include "data/image_io.h"
#include "data/sources.h"
#include "data_test_util.h"
#include "gzip_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
namespace fs = std::filesystem;

namespace {

struct Outcome {
  int exit_code = -1;
  std::string err;
};

// cnn-train MODEL --device cpu --max-steps 1 under `ulimit -v 4 GiB` (none in an ASan build: its
// shadow memory alone reserves terabytes) and `timeout 60`, in `dir`.
Outcome train(const fs::path& dir, const std::string& model_yaml) {
  const fs::path program = fs::path(CNN_BUILD_DIR) / "app" / "cnn-train";
  cnn::test::write_text_file(dir / "model.yaml", model_yaml);
  const std::string cmd = fmt::format(
      "cd '{}' && {}exec timeout 60 '{}' model.yaml --device cpu --max-steps 1 --out run --quiet >/dev/null 2>err.txt",
      dir.string(), cnn::test::address_space_cap(4096), program.string());
  const int status = std::system(cmd.c_str());
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.err = cnn::test::read_text_file(dir / "err.txt");
  return o;
}

std::string model(const std::string& data, int64_t channels = 1, const std::string& size = "48") {
  return fmt::format(
      "name: hostile\n"
      "input: {{channels: {}, height: {}, width: {}}}\n"
      "classes: [angry, disgust, fear, happy, sad, surprise, neutral]\n"
      "layers:\n"
      "  - {{name: pool, type: global_avgpool}}\n"
      "  - {{name: fc, type: dense, units: 7}}\n"
      "data: {}\n"
      "train: {{epochs: 1, batch_size: 4}}\n",
      channels, size, size, data);
}

}  // namespace

TEST_CASE("cnn-train refuses each hostile data input with exit 1 or 2 naming the file", "[cpu]") {
  if (!fs::exists(fs::path(CNN_BUILD_DIR) / "app" / "cnn-train")) CNN_SKIP("cnn-train is not built");
  cnn::test::TempDir dir;
  std::vector<uint8_t> pixels(2304, 100);
  const std::string row = fer2013_csv_row(3, pixels.data(), 2304, "Training") + "\n";
  struct Case {
    std::string what, data, expect;
  };
  std::vector<Case> cases;

  REQUIRE(mkfifo((dir / "fifo.csv").c_str(), 0600) == 0);
  cases.push_back({"a FIFO as the CSV", "{format: fer2013-csv, path: fifo.csv}", "fifo.csv: is a FIFO"});

  std::vector<std::string> rows{"emotion,pixels,Usage\n"};
  for (int i = 0; i < 40; ++i) rows.push_back(row);
  cnn::test::write_text_file(dir / "cut.csv.gz", cnn::test::gzip_stored(rows, false));
  cases.push_back({"a gzip CSV cut at a row boundary", "{format: fer2013-csv, path: cut.csv.gz}",
                   "cut.csv.gz: truncated gzip data"});

  cases.push_back({"a missing CSV", "{format: fer2013-csv, path: nowhere/fer2013.csv}",
                   "nowhere/fer2013.csv: no such file (looked at " + (dir / "nowhere/fer2013.csv").string()});

  fs::create_directories(dir / "idx");
  const std::string header("\x00\x00\x08\x03\x00\x01\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00", 16);
  cnn::test::write_text_file(dir / "idx" / "train-images-idx3-ubyte", header);  // 65536 x 2^24 x 2^24
  const auto labels = idx_file_bytes(std::vector<uint8_t>(65536, 1), 65536, 0, 0);
  write_file_bytes((dir / "idx" / "train-labels-idx1-ubyte").string(), labels.data(), labels.size());
  cases.push_back({"an idx header of 65536 x 2^24 x 2^24", "{format: idx, path: idx}",
                   "train-images-idx3-ubyte: header field 'rows'"});

  if (image_io_available()) {
    for (const char* cls : {"angry", "disgust", "fear", "happy", "sad", "surprise", "neutral"}) {
      fs::create_directories(dir / "images" / "train" / cls);
      fs::create_directories(dir / "bomb" / "train" / cls);
    }
    REQUIRE(mkfifo((dir / "images" / "train" / "happy" / "pipe.png").c_str(), 0600) == 0);
    cases.push_back({"a FIFO in an image folder", "{format: image-folder, path: images}", "pipe.png: is a FIFO"});

    cnn::test::write_text_file(dir / "bomb" / "train" / "happy" / "big.pgm",
                               "P5\n30000 30000\n255\n" + std::string(1024, '\x80'));
    cases.push_back({"an image declaring 900 megapixels", "{format: image-folder, path: bomb}",
                     "big.pgm: PNM header declares 30000 x 30000 pixels"});
  }

  for (const Case& c : cases) {
    INFO(c.what);
    fs::remove_all(dir / "run");
    const Outcome o = train(dir.path(), model(c.data));
    INFO(o.err);
    CHECK((o.exit_code == 1 || o.exit_code == 2));
    CHECK(o.err.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("cnn-train refuses a synthetic input of 2^32 x 2^32 pixels with exit 2", "[cpu]") {
  if (!fs::exists(fs::path(CNN_BUILD_DIR) / "app" / "cnn-train")) CNN_SKIP("cnn-train is not built");
  cnn::test::TempDir dir;
  // The model file's declared range (at most 2^20 a dimension) refuses it before the data is read;
  // the data path's own limit is tested on load_dataset directly (test_hostile_data.cpp).
  const std::string yaml = fmt::format(
      "name: hostile\n"
      "input: {{channels: 1, height: {0}, width: {0}}}\n"
      "classes: [a, b]\n"
      "layers:\n"
      "  - {{name: fc, type: dense, units: 2}}\n"
      "data: {{format: synthetic, synthetic_size: 4}}\n"
      "train: {{epochs: 1, batch_size: 4}}\n",
      int64_t{1} << 32);
  const Outcome o = train(dir.path(), yaml);
  INFO(o.err);
  CHECK(o.exit_code == 2);
  CHECK(o.err.find("model.yaml:2:") != std::string::npos);
  CHECK(o.err.find("'input.height'") != std::string::npos);
}
