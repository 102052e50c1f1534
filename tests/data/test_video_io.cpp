// What --predict takes for a camera or a video (data/video_io.h), in every build.
#include <string>

#include "core/error.h"
#include "data/image_io.h"
#include "data/video_io.h"
#include "data_test_util.h"
#include "support/catch.h"

using namespace cnn;
using cnn::test::error_of;

TEST_CASE("camera_index reads camera:N and refuses a camera: without an index", "[cpu]") {
  CHECK(camera_index("camera:0") == 0);
  CHECK(camera_index("camera:12") == 12);
  CHECK_FALSE(camera_index("face.png").has_value());
  CHECK_FALSE(camera_index("cameras/a.avi").has_value());
  for (const char* bad : {"camera:", "camera:x", "camera:-1", "camera:1.5", "camera:99999"}) {
    INFO(bad);
    CHECK_THROWS_AS(camera_index(bad), ConfigError);
    CHECK(error_of([&] { camera_index(bad); }).find(bad) != std::string::npos);
  }
}

TEST_CASE("is_video_path tells video files from images by their extension", "[cpu]") {
  for (const char* v : {"a.avi", "dir/b.MP4", "c.mkv", "d.mov", "e.webm", "f.m4v", "g.mpg", "h.mpeg", "i.wmv"})
    CHECK(is_video_path(v));
  for (const char* i : {"a.png", "b.jpg", "avi", "dir.avi/face.png", "c.avi.png", "noext"}) CHECK_FALSE(is_video_path(i));
}

TEST_CASE("without OpenCV a video source is an error that says so", "[cpu]") {
  if (image_io_available()) CNN_SKIP("this build has OpenCV (tests/data/test_video_io_opencv.cpp covers it)");
  CHECK(error_of([] { VideoSource s("a.avi"); }).find("OpenCV") != std::string::npos);
  CHECK(error_of([] { VideoSink s("a.avi", 10, 8, 8); }).find("OpenCV") != std::string::npos);
}
