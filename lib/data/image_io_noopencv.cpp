// Stand-in for image_io_opencv.cpp in builds without OpenCV: reading or writing images is an error.
#include "core/error.h"
#include "data/image_io.h"

namespace cnn {

bool image_io_available() { return false; }

std::string decode_image_file(const std::string& path, bool, int64_t, int64_t, int64_t, uint8_t*) {
  CNN_THROW("{}: reading images needs OpenCV, and this build has none (rebuild with -DCNN_WITH_OPENCV=ON)", path);
}

bool read_image_file(const std::string& path, bool, int64_t, int64_t, int64_t, uint8_t*) {
  CNN_THROW("{}: reading images needs OpenCV, and this build has none (rebuild with -DCNN_WITH_OPENCV=ON)", path);
}

Image read_image(const std::string& path, bool) {
  CNN_THROW("{}: reading images needs OpenCV, and this build has none (rebuild with -DCNN_WITH_OPENCV=ON)", path);
}

Image gray_image(const Image&) { CNN_THROW("converting images needs OpenCV, and this build has none"); }

void resize_region(const Image&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, uint8_t*) {
  CNN_THROW("resizing images needs OpenCV, and this build has none (rebuild with -DCNN_WITH_OPENCV=ON)");
}

void write_image(const std::string& path, const Image&) {
  CNN_THROW("{}: writing images needs OpenCV, and this build has none (rebuild with -DCNN_WITH_OPENCV=ON)", path);
}

void write_image_file(const std::string& path, const uint8_t*, int64_t, int64_t, int64_t) {
  CNN_THROW("{}: writing images needs OpenCV, and this build has none (rebuild with -DCNN_WITH_OPENCV=ON)", path);
}

}  // namespace cnn
