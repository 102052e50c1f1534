// OpenCV implementation of image_io.h. Trap: OpenCV holds colour as interleaved BGR; we hold RGB planes.
#include "data/image_io.h"

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "core/error.h"

namespace cnn {

bool image_io_available() { return true; }

bool read_image_file(const std::string& path, bool gray, int64_t channels, int64_t height, int64_t width,
                     uint8_t* dst) {
  CNN_CHECK(channels == 1 || channels == 3, "images are read with 1 or 3 channels, not {}", channels);
  CNN_CHECK(!(channels == 1 && !gray), "an RGB read needs 3 channels");
  cv::Mat img;
  try {
    img = cv::imread(path, gray ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
  } catch (const cv::Exception&) {
    return false;
  }
  if (img.empty()) return false;
  if (!gray) cv::cvtColor(img, img, cv::COLOR_BGR2RGB);
  if (img.rows != height || img.cols != width) {
    const bool shrink = static_cast<int64_t>(img.rows) * img.cols > height * width;
    cv::Mat resized;
    cv::resize(img, resized, cv::Size(static_cast<int>(width), static_cast<int>(height)), 0, 0,
               shrink ? cv::INTER_AREA : cv::INTER_LINEAR);
    img = resized;
  }
  const int64_t hw = height * width;
  const int src_c = img.channels();
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* row = img.ptr<uint8_t>(static_cast<int>(y));
    for (int64_t x = 0; x < width; ++x) {
      for (int64_t c = 0; c < channels; ++c) dst[c * hw + y * width + x] = row[x * src_c + (src_c == 1 ? 0 : c)];
    }
  }
  return true;
}

void write_image_file(const std::string& path, const uint8_t* src, int64_t c, int64_t h, int64_t w) {
  CNN_CHECK(c == 1 || c == 3, "images are written with 1 or 3 channels, not {}", c);
  cv::Mat img(static_cast<int>(h), static_cast<int>(w), c == 1 ? CV_8UC1 : CV_8UC3);
  for (int64_t y = 0; y < h; ++y) {
    uint8_t* row = img.ptr<uint8_t>(static_cast<int>(y));
    for (int64_t x = 0; x < w; ++x) {
      for (int64_t k = 0; k < c; ++k) row[x * c + k] = src[((c == 3 ? 2 - k : k) * h + y) * w + x];  // RGB -> BGR
    }
  }
  bool ok = false;
  try {
    ok = cv::imwrite(path, img);
  } catch (const cv::Exception& e) {
    CNN_THROW("{}: cannot write image: {}", path, e.what());
  }
  if (!ok) CNN_THROW("{}: cannot write image (unknown extension or unwritable path)", path);
}

}  // namespace cnn
