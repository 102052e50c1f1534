// Built only with OpenCV (file suffix); images are written through data/image_io.h.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "data/dataset.h"
#include "data/image_io.h"
#include "data_test_util.h"
#include "gzip_test_util.h"
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
  CHECK(msg.find("broken.png: not a PNG, JPEG, BMP, PNM, TIFF or WebP image") != std::string::npos);
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

namespace {

bool noted(const DataSplits& s, const std::string& part) {
  for (const auto& n : s.notes) {
    if (n.find(part) != std::string::npos) return true;
  }
  return false;
}

// What f writes to file descriptor 2 (the test's own redirect, around the library's).
template <typename F>
std::string raw_stderr_of(F&& f) {
  cnn::test::TempDir dir;
  const std::string path = (dir / "stderr.txt").string();
  std::fflush(stderr);
  const int saved = dup(2);
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  dup2(fd, 2);
  close(fd);
  f();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  return cnn::test::read_text_file(path);
}

}  // namespace

TEST_CASE("image folders skip non-image files by extension, counted and named per split", "[cpu]") {
  cnn::test::TempDir dir;
  make_tree(dir.path());
  const fs::path train = dir.path() / "train";
  cnn::test::write_text_file(train / "cat" / "Thumbs.db", "not an image");
  cnn::test::write_text_file(train / "dog" / "notes.txt", "not an image");
  cnn::test::write_text_file(train / "README", "loose file");
  fs::copy_file(train / "cat" / "c0.png", train / "cat" / "UPPER.PNG");  // extensions in any case
  fs::copy_file(train / "cat" / "c0.png", train / "cat" / "image.png.bak");  // a PNG, not named like one
  DataSplits s = load_dataset(folder_spec(dir.path()), InputSpec{1, 8, 8}, {});
  CHECK(s.train.size() + s.val.size() == 9);
  CHECK(s.bad_skipped == 0);
  CHECK(noted(s, "skipped 4 non-image files in " + train.string() + ": README, cat/Thumbs.db, cat/image.png.bak, "
                 "dog/notes.txt"));
  CHECK(!noted(s, "non-image files in " + (dir.path() / "test").string()));
}

TEST_CASE("a FIFO inside an image folder is refused by name without blocking", "[cpu]") {
  for (const std::string name : {"pipe.png", "Thumbs.db"}) {
    cnn::test::TempDir dir;
    make_tree(dir.path());
    const fs::path fifo = dir.path() / "train" / "dog" / name;
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    DataSpec spec = folder_spec(dir.path());
    spec.on_bad_row = "skip";
    const std::string msg = error_of([&] { load_dataset(spec, InputSpec{1, 8, 8}, {}); });
    CHECK(msg.find(fifo.string() + ": is a FIFO (named pipe), not a regular file") != std::string::npos);
  }
}

TEST_CASE("libpng warnings reach the data notes, not raw stderr", "[cpu]") {
  cnn::test::TempDir dir;
  make_tree(dir.path());
  // An ancillary tEXt chunk with a wrong CRC after IHDR: libpng warns ("tEXt: CRC error") and goes on.
  const fs::path png = dir.path() / "train" / "cat" / "c1.png";
  std::string bytes = cnn::test::read_text_file(png);
  const std::string text("tEXtComment\0hello", 17);
  std::string chunk("\0\0\0\x0d", 4);
  chunk += text;
  cnn::test::put_le32(chunk, 0x12345678);  // not the CRC
  bytes.insert(33, chunk);                 // 8-byte signature + 25-byte IHDR chunk
  cnn::test::write_text_file(png, bytes);
  DataSplits s;
  const std::string raw = raw_stderr_of([&] { s = load_dataset(folder_spec(dir.path()), InputSpec{1, 8, 8}, {}); });
  CHECK(raw.find("libpng") == std::string::npos);
  CHECK(noted(s, "image decoder messages while reading " + (dir.path() / "train").string() + " (1 lines"));
  CHECK(noted(s, "libpng warning: tEXt: CRC error"));
  CHECK(s.train.size() + s.val.size() == 8);
}

TEST_CASE("an image declaring too many pixels is a bad file: an error naming it, or skipped", "[cpu]") {
  cnn::test::TempDir dir;
  make_tree(dir.path());
  const fs::path p = dir.path() / "train" / "dog" / "bomb.pgm";
  cnn::test::write_text_file(p, "P5\n30000 30000\n255\n" + std::string(64, '\x80'));
  DataSpec spec = folder_spec(dir.path());
  const std::string msg = error_of([&] { load_dataset(spec, InputSpec{1, 8, 8}, {}); });
  CHECK(msg.find(p.string() + ": PNM header declares 30000 x 30000 pixels, above the limit") != std::string::npos);
  spec.on_bad_row = "skip";
  DataSplits s = load_dataset(spec, InputSpec{1, 8, 8}, {});
  CHECK(s.bad_skipped == 1);
  CHECK(noted(s, "skipped 1 unreadable files (on_bad_row: skip): " + p.string() + ": PNM header declares"));
}

