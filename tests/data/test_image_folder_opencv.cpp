// Built only with OpenCV (file suffix); images are written through data/image_io.h.
#include <cmath>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "data/dataset.h"
#include "data/image_io.h"
#include "data_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using cnn::test::error_of;
namespace fs = std::filesystem;

namespace {

// root/<split>/<cls>/<name>.png: a 8x8 image of constant colour (r, g, b).
void write_png(const fs::path& root, const std::string& split, const std::string& cls, const std::string& name,
               int r, int g, int b) {
  fs::create_directories(root / split / cls);
  std::vector<uint8_t> planes;
  for (int v : {r, g, b}) planes.insert(planes.end(), 64, static_cast<uint8_t>(v));
  write_image_file((root / split / cls / (name + ".png")).string(), planes.data(), 3, 8, 8);
}

void make_tree(const fs::path& root) {
  for (int i = 0; i < 4; ++i) {
    write_png(root, "train", "cat", "c" + std::to_string(i), 10, 20, 30 + i);
    write_png(root, "train", "dog", "d" + std::to_string(i), 200, 100, 50);
  }
  write_png(root, "test", "dog", "t0", 1, 2, 3);
}

DataSpec folder_spec(const fs::path& root) {
  DataSpec spec;
  spec.format = "image-folder";
  spec.path = root.string();
  spec.val_split = 0.25;
  return spec;
}

}  // namespace

TEST_CASE("image folder reads classes from folders, in RGB order, resized to the input", "[cpu]") {
  cnn::test::TempDir dir;
  make_tree(dir.path());
  DataSplits s = load_dataset(folder_spec(dir.path()), InputSpec{3, 4, 4}, {});
  CHECK(s.class_names == std::vector<std::string>{"cat", "dog"});
  CHECK(s.train.size() == 6);
  CHECK(s.val.size() == 2);  // carved: train has no val folder
  REQUIRE(s.test.size() == 1);
  CHECK(s.test.labels[0] == 1);
  CHECK(s.test.height == 4);
  // Planes come back as R, G, B: the dog test image is (1, 2, 3).
  const uint8_t* t = s.test.sample(0);
  CHECK(t[0] == 1);
  CHECK(t[16] == 2);
  CHECK(t[32] == 3);
  CHECK(class_histogram(s.val, 2) == std::vector<int64_t>{1, 1});
}

TEST_CASE("image folder reads gray for one-channel models and honours the model's class order", "[cpu]") {
  cnn::test::TempDir dir;
  make_tree(dir.path());
  DataSplits s = load_dataset(folder_spec(dir.path()), InputSpec{1, 8, 8}, {"dog", "cat"});
  REQUIRE(s.test.size() == 1);
  CHECK(s.test.labels[0] == 0);  // "dog" is class 0 here
  CHECK(s.test.channels == 1);
  // Gray of RGB (1, 2, 3) is about 0.299*1 + 0.587*2 + 0.114*3 = 1.8 (the decoder rounds its own way).
  CHECK(std::abs(s.test.pixels[0] - 1.8) <= 1.0);
}

TEST_CASE("image folder class mismatches list the differences", "[cpu]") {
  cnn::test::TempDir dir;
  make_tree(dir.path());
  std::string msg = error_of([&] { load_dataset(folder_spec(dir.path()), InputSpec{1, 8, 8}, {"cat", "bird"}); });
  CHECK(msg.find("no folder for [bird]") != std::string::npos);
  CHECK(msg.find("folders not among the classes [dog]") != std::string::npos);
  write_png(dir.path(), "test", "dogs", "x", 0, 0, 0);
  msg = error_of([&] { load_dataset(folder_spec(dir.path()), InputSpec{1, 8, 8}, {}); });
  CHECK(msg.find("class folder 'dogs' is not one of the classes [cat, dog], did you mean 'dog'?") != std::string::npos);
}

TEST_CASE("an unreadable image is an error naming it, or skipped and counted", "[cpu]") {
  cnn::test::TempDir dir;
  make_tree(dir.path());
  cnn::test::write_text_file(dir.path() / "train" / "dog" / "broken.png", "not a png");
  cnn::test::write_text_file(dir.path() / "train" / "dog" / ".hidden", "ignored");
  DataSpec spec = folder_spec(dir.path());
  std::string msg = error_of([&] { load_dataset(spec, InputSpec{1, 8, 8}, {}); });
  CHECK(msg.find("broken.png: OpenCV cannot read this image") != std::string::npos);
  spec.on_bad_row = "skip";
  DataSplits s = load_dataset(spec, InputSpec{1, 8, 8}, {});
  CHECK(s.bad_skipped == 1);
  CHECK(s.train.size() + s.val.size() == 8);
  bool noted = false;
  for (const auto& n : s.notes) noted = noted || n.find("skipped 1 unreadable files") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("image folder without a train folder or with rgb for a gray model is refused", "[cpu]") {
  cnn::test::TempDir dir;
  std::string msg = error_of([&] { load_dataset(folder_spec(dir.path()), InputSpec{1, 8, 8}, {}); });
  CHECK(msg.find("no train/ folder") != std::string::npos);
  make_tree(dir.path());
  DataSpec spec = folder_spec(dir.path());
  spec.color = "rgb";
  CHECK_THROWS_AS(load_dataset(spec, InputSpec{1, 8, 8}, {}), ConfigError);
}
