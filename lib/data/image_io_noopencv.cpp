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

void write_image_file(const std::string& path, const uint8_t*, int64_t, int64_t, int64_t) {
  CNN_THROW("{}: writing images needs OpenCV, and this build has none (rebuild with -DCNN_WITH_OPENCV=ON)", path);
}

}  // namespace cnn
