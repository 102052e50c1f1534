// Built only with OpenCV (file suffix): video files written and read back (data/video_io.h), and
// the errors for inputs that can't be opened.
#include <cmath>
#include <filesystem>
#include <string>

#include "data/video_io.h"
#include "data_test_util.h"
#include "support/catch.h"
#include "support/test_util.h"

using namespace cnn;
using cnn::test::error_of;

namespace {

// An RGB frame of w x h: red rises with x, green is `level`, blue falls with y.
Image test_frame(int64_t w, int64_t h, uint8_t level) {
  Image f;
  f.width = w, f.height = h, f.channels = 3;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      f.pixels.insert(f.pixels.end(), {uint8_t(x * 255 / w), level, uint8_t(255 - y * 255 / h)});
  return f;
}

double mean_abs_diff(const Image& a, const Image& b) {
  double s = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) s += std::abs(double(a.pixels[i]) - double(b.pixels[i]));
  return s / double(a.pixels.size());
}

}  // namespace

TEST_CASE("a Motion JPEG video written by VideoSink reads back frame by frame with its size and rate", "[cpu]") {
  cnn::test::TempDir dir;
  const std::string path = (dir / "v.avi").string();
  {
    VideoSink sink(path, 12.5, 64, 48);
    for (int k = 0; k < 5; ++k) sink.write(test_frame(64, 48, uint8_t(40 * k + 20)));
    CHECK(error_of([&] { sink.write(test_frame(32, 48, 0)); }).find("32x48") != std::string::npos);
    sink.close();
  }
  VideoSource src(path);
  CHECK_FALSE(src.is_camera());
  CHECK(src.width() == 64);
  CHECK(src.height() == 48);
  CHECK(src.fps() == Approx(12.5));
  Image frame;
  int k = 0;
  while (src.read(frame)) {
    INFO("frame " << k);
    REQUIRE(k < 5);
    CHECK(frame.channels == 3);
    CHECK(frame.width == 64);
    CHECK(frame.height == 48);
    CHECK(mean_abs_diff(frame, test_frame(64, 48, uint8_t(40 * k + 20))) < 6);  // JPEG is lossy; RGB order kept
    ++k;
  }
  CHECK(k == 5);
}

TEST_CASE("VideoSource names a missing video, an unreadable one, and a camera that is not there", "[cpu]") {
  cnn::test::TempDir dir;
  CHECK(error_of([&] { VideoSource s((dir / "nope.avi").string()); }).find("nope.avi' does not exist") !=
        std::string::npos);
  cnn::test::write_text_file(dir / "text.avi", "not a video at all");
  CHECK(error_of([&] { VideoSource s((dir / "text.avi").string()); }).find("text.avi' cannot be opened") !=
        std::string::npos);
  const int index = 63;  // far above any camera a test machine has
  if (std::filesystem::exists("/dev/video" + std::to_string(index))) CNN_SKIP("/dev/video63 exists here");
  const std::string err = error_of([&] { VideoSource s("camera:" + std::to_string(index)); });
  CHECK(err.find("camera 63 cannot be opened") != std::string::npos);
}

TEST_CASE("VideoSink names a path it cannot write", "[cpu]") {
  cnn::test::TempDir dir;
  CHECK(error_of([&] { VideoSink s((dir / "no" / "such" / "dir" / "v.avi").string(), 10, 8, 8); }).find("v.avi") !=
        std::string::npos);
}
