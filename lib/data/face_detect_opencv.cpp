// OpenCV implementation of FaceDetector (face_detect.h): Haar cascade on the equalised gray image.
// Trap: OpenCV holds colour as interleaved BGR; dst gets RGB planes, like read_image_file. Trap: the
// cascade keeps UMat buffers, whose allocator asks OpenCV whether to use OpenCL: left on, that
// loads the OpenCL ICD loader and, where a platform exists, makes a context on its device.
#include "data/face_detect.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include <opencv2/core.hpp>
#include <opencv2/core/ocl.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/objdetect.hpp>

#include "core/error.h"
#include "data/image_decode_opencv.h"
#include "data/stderr_capture.h"

namespace cnn {

struct FaceDetector::Impl {
  mutable cv::CascadeClassifier cascade;  // detectMultiScale is not const
};

FaceDetector::FaceDetector(const std::string& cascade_path)
    : m_impl(std::make_unique<Impl>()), m_cascade_path(find_face_cascade(cascade_path)) {
  bool ok = false;
  try {
    ok = m_impl->cascade.load(m_cascade_path);
  } catch (const cv::Exception& e) {
    CNN_THROW("face cascade '{}' cannot be loaded: {}", m_cascade_path, e.what());
  }
  if (!ok) CNN_THROW("face cascade '{}' cannot be loaded (not an OpenCV cascade XML file?)", m_cascade_path);
}

FaceDetector::~FaceDetector() = default;

static std::optional<FaceBox> largest_in(cv::CascadeClassifier& cascade, const cv::Mat& gray) {
  // The detector runs on the CPU, on the Mats we pass. OpenCV's OpenCL switch is per thread and
  // starts undecided: the cascade's first UMat then dlopen()s libOpenCL.so.1 and, where a platform
  // exists (the GPU machine's NVIDIA ICD), creates an OpenCL context on that device behind our CUDA
  // context. Off, nothing is loaded or created. It also removed the one crash of tools/sanitize.sh:
  // libOpenCL.so.1 has thread-local storage, so its block for this thread is malloc'd when first
  // used; GCC 12's LeakSanitizer takes a dynamic TLS block 16 bytes past a page boundary for a
  // glibc 2.19 one and reads its bounds from the malloc header before it, and its tracer died scanning that bogus range at exit (tools/sanitize.sh).
  cv::ocl::setUseOpenCL(false);
  cv::Mat equalised;
  cv::equalizeHist(gray, equalised);
  std::vector<cv::Rect> faces;
  // 1.1 / 5 neighbours are the usual frontal-face settings; 24 px is the cascade's own window.
  cascade.detectMultiScale(equalised, faces, 1.1, 5, 0, cv::Size(24, 24));
  if (faces.empty()) return std::nullopt;
  auto it = std::max_element(faces.begin(), faces.end(),
                             [](const cv::Rect& a, const cv::Rect& b) { return a.area() < b.area(); });
  return FaceBox{it->x, it->y, it->width, it->height};
}

std::optional<FaceBox> FaceDetector::largest_face(const uint8_t* gray, int64_t height, int64_t width) const {
  CNN_CHECK(height > 0 && width > 0, "image of {}x{} pixels", width, height);
  cv::Mat img(static_cast<int>(height), static_cast<int>(width), CV_8UC1, const_cast<uint8_t*>(gray));
  return largest_in(m_impl->cascade, img);
}

FaceImage FaceDetector::read_face(const std::string& path, double margin, bool gray, int64_t channels, int64_t height,
                                  int64_t width, uint8_t* dst) const {
  CNN_CHECK(channels == 1 || channels == 3, "images are read with 1 or 3 channels, not {}", channels);
  CNN_CHECK(!(channels == 1 && !gray), "an RGB read needs 3 channels");
  cv::Mat img;
  std::string problem;
  {
    StderrCapture capture;
    bool decoder_failed = false;
    img = decode_checked(path, gray, problem, decoder_failed);
    for (const std::string& line : capture.finish()) spdlog::warn("{}: image decoder: {}", path, line);
  }
  if (img.empty()) CNN_THROW("{}: {}", path, problem);
  cv::Mat gray_img;
  if (gray) {
    gray_img = img;
  } else {
    cv::cvtColor(img, gray_img, cv::COLOR_BGR2GRAY);
    cv::cvtColor(img, img, cv::COLOR_BGR2RGB);
  }
  FaceImage out;
  out.image_height = img.rows;
  out.image_width = img.cols;
  out.crop = FaceBox{0, 0, img.cols, img.rows};
  if (std::optional<FaceBox> face = largest_in(m_impl->cascade, gray_img)) {
    out.found = true;
    out.face = *face;
    out.crop = square_face_crop(*face, margin, img.rows, img.cols);
  }
  const FaceBox& c = out.crop;
  cv::Mat region = img(cv::Rect(int(c.x), int(c.y), int(c.width), int(c.height))), resized;
  const bool shrink = c.width * c.height > height * width;
  cv::resize(region, resized, cv::Size(int(width), int(height)), 0, 0, shrink ? cv::INTER_AREA : cv::INTER_LINEAR);
  const int src_c = resized.channels();
  const int64_t hw = height * width;
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* row = resized.ptr<uint8_t>(static_cast<int>(y));
    for (int64_t x = 0; x < width; ++x)
      for (int64_t k = 0; k < channels; ++k) dst[k * hw + y * width + x] = row[x * src_c + (src_c == 1 ? 0 : k)];
  }
  return out;
}

}  // namespace cnn
