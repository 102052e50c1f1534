// OpenCV implementation of image_io.h. Trap: OpenCV holds colour as interleaved BGR; we hold RGB
// planes. Files are read by read_raw_file and decoded with cv::imdecode, never cv::imread, so the
// size and header checks see exactly the bytes the decoder gets.
#include "data/image_io.h"

#include <spdlog/spdlog.h>

#include <cstring>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "core/error.h"
#include "data/data_limits.h"
#include "data/gzip.h"
#include "data/image_decode_opencv.h"
#include "data/image_header.h"
#include "data/stderr_capture.h"

namespace cnn {

bool image_io_available() { return true; }

cv::Mat decode_checked(const std::string& path, bool gray, std::string& problem, bool& decoder_failed) {
  decoder_failed = false;
  const std::vector<uint8_t> bytes = read_raw_file(path, kMaxImageFileBytes);
  if (static_cast<int64_t>(bytes.size()) > kMaxImageFileBytes) {
    problem = fmt::format("more than {} bytes, the limit for one image file (kMaxImageFileBytes in "
                          "lib/data/data_limits.h)", kMaxImageFileBytes);
    return {};
  }
  ImageHeader h;
  problem = read_image_header(bytes.data(), bytes.size(), h);
  if (!problem.empty()) return {};
  const std::optional<int64_t> pixels = checked_product({h.width, h.height});
  if (!pixels || *pixels > kMaxImagePixels) {
    problem = fmt::format("{} header declares {} x {} pixels, above the limit of {} pixels ({} megapixels) for one "
                          "image (kMaxImagePixels in lib/data/data_limits.h); refused before decoding", h.format,
                          h.width, h.height, kMaxImagePixels, kMaxImagePixels >> 20);
    return {};
  }
  cv::Mat img;
  try {
    const cv::Mat raw(1, static_cast<int>(bytes.size()), CV_8UC1, const_cast<uint8_t*>(bytes.data()));
    img = cv::imdecode(raw, gray ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
  } catch (const cv::Exception& e) {
    problem = fmt::format("OpenCV cannot decode this {} image: {}", h.format, e.what());
    decoder_failed = true;
    return {};
  }
  if (img.empty()) {
    problem = fmt::format("OpenCV cannot decode this {} image ({} x {} pixels in its header)", h.format, h.width,
                          h.height);
    decoder_failed = true;
    return {};
  }
  return img;
}

cv::Mat image_mat(const Image& img) {
  CNN_CHECK(img.channels == 1 || img.channels == 3, "images hold 1 or 3 channels, not {}", img.channels);
  CNN_CHECK(int64_t(img.pixels.size()) == img.height * img.width * img.channels, "{} bytes for a {}x{}x{} image",
            img.pixels.size(), img.height, img.width, img.channels);
  return cv::Mat(static_cast<int>(img.height), static_cast<int>(img.width), img.channels == 1 ? CV_8UC1 : CV_8UC3,
                 const_cast<uint8_t*>(img.pixels.data()));
}

Image mat_image(const cv::Mat& mat) {
  CNN_CHECK(mat.depth() == CV_8U && (mat.channels() == 1 || mat.channels() == 3), "an 8-bit Mat of 1 or 3 channels");
  Image img;
  img.height = mat.rows;
  img.width = mat.cols;
  img.channels = mat.channels();
  img.pixels.resize(static_cast<size_t>(img.height * img.width * img.channels));
  const size_t row_bytes = static_cast<size_t>(img.width * img.channels);
  for (int y = 0; y < mat.rows; ++y) std::memcpy(img.pixels.data() + y * row_bytes, mat.ptr<uint8_t>(y), row_bytes);
  return img;
}

namespace {

// src (interleaved, gray or RGB) resized to height x width and written as `channels` planes.
void to_planes(const cv::Mat& src, int64_t channels, int64_t height, int64_t width, uint8_t* dst) {
  CNN_CHECK(channels == 1 || channels == 3, "images are read with 1 or 3 channels, not {}", channels);
  CNN_CHECK(!(channels == 1 && src.channels() != 1), "an RGB image makes 3 planes, not 1");
  cv::Mat img = src;
  if (img.rows != height || img.cols != width) {
    const bool shrink = static_cast<int64_t>(img.rows) * img.cols > height * width;
    cv::Mat resized;
    cv::resize(src, resized, cv::Size(static_cast<int>(width), static_cast<int>(height)), 0, 0,
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
}

std::string decode_into(const std::string& path, bool gray, int64_t channels, int64_t height, int64_t width,
                        uint8_t* dst, bool& decoder_failed) {
  CNN_CHECK(channels == 1 || channels == 3, "images are read with 1 or 3 channels, not {}", channels);
  CNN_CHECK(!(channels == 1 && !gray), "an RGB read needs 3 channels");
  std::string problem;
  cv::Mat img = decode_checked(path, gray, problem, decoder_failed);
  if (img.empty()) return problem;
  if (!gray) cv::cvtColor(img, img, cv::COLOR_BGR2RGB);
  to_planes(img, channels, height, width, dst);
  return "";
}

void imwrite_checked(const std::string& path, const cv::Mat& bgr) {
  bool ok = false;
  try {
    ok = cv::imwrite(path, bgr);
  } catch (const cv::Exception& e) {
    CNN_THROW("{}: cannot write image: {}", path, e.what());
  }
  if (!ok) CNN_THROW("{}: cannot write image (unknown extension or unwritable path)", path);
}

}  // namespace

Image read_image(const std::string& path, bool gray) {
  std::string problem;
  bool decoder_failed = false;
  cv::Mat img;
  {
    StderrCapture capture;
    img = decode_checked(path, gray, problem, decoder_failed);
    for (const std::string& line : capture.finish()) spdlog::warn("{}: image decoder: {}", path, line);
  }
  if (img.empty()) CNN_THROW("{}: {}", path, problem);
  if (!gray) cv::cvtColor(img, img, cv::COLOR_BGR2RGB);
  return mat_image(img);
}

Image gray_image(const Image& img) {
  if (img.channels == 1) return img;
  cv::Mat gray;
  cv::cvtColor(image_mat(img), gray, cv::COLOR_RGB2GRAY);
  return mat_image(gray);
}

void resize_region(const Image& img, int64_t x, int64_t y, int64_t w, int64_t h, int64_t channels, int64_t height,
                   int64_t width, uint8_t* dst) {
  CNN_CHECK(x >= 0 && y >= 0 && w > 0 && h > 0 && x + w <= img.width && y + h <= img.height,
            "region {}x{} at ({}, {}) does not lie inside the {}x{} image", w, h, x, y, img.width, img.height);
  const cv::Mat region = image_mat(img)(cv::Rect(static_cast<int>(x), static_cast<int>(y), static_cast<int>(w),
                                                 static_cast<int>(h)));
  to_planes(region, channels, height, width, dst);
}

void write_image(const std::string& path, const Image& img) {
  if (img.channels == 1) return imwrite_checked(path, image_mat(img));
  cv::Mat bgr;  // a new Mat: converting in place would write into img's pixels
  cv::cvtColor(image_mat(img), bgr, cv::COLOR_RGB2BGR);
  imwrite_checked(path, bgr);
}

std::string decode_image_file(const std::string& path, bool gray, int64_t channels, int64_t height, int64_t width,
                              uint8_t* dst) {
  bool decoder_failed = false;
  return decode_into(path, gray, channels, height, width, dst, decoder_failed);
}

bool read_image_file(const std::string& path, bool gray, int64_t channels, int64_t height, int64_t width,
                     uint8_t* dst) {
  std::string problem;
  bool decoder_failed = false;
  {
    StderrCapture capture;
    problem = decode_into(path, gray, channels, height, width, dst, decoder_failed);
    for (const std::string& line : capture.finish()) spdlog::warn("{}: image decoder: {}", path, line);
  }
  if (problem.empty()) return true;
  if (decoder_failed) return false;
  CNN_THROW("{}: {}", path, problem);
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
  imwrite_checked(path, img);
}

}  // namespace cnn
