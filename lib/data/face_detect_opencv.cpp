// OpenCV implementation of FaceDetector (face_detect.h): Haar cascade on the equalised gray image;
// the rest of the class (largest face, crops) is in face_detect.cpp. Trap: the
// cascade keeps UMat buffers, whose allocator asks OpenCV whether to use OpenCL: left on, that
// loads the OpenCL ICD loader and, where a platform exists, makes a context on its device.
#include "data/face_detect.h"

#include <algorithm>

#include <opencv2/core.hpp>
#include <opencv2/core/ocl.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/objdetect.hpp>

#include "core/error.h"

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

std::vector<FaceBox> FaceDetector::faces(const uint8_t* gray, int64_t height, int64_t width) const {
  CNN_CHECK(height > 0 && width > 0, "image of {}x{} pixels", width, height);
  // The detector runs on the CPU, on the Mats we pass. OpenCV's OpenCL switch is per thread and
  // starts undecided: the cascade's first UMat then dlopen()s libOpenCL.so.1 and, where a platform
  // exists (the GPU machine's NVIDIA ICD), creates an OpenCL context on that device behind our CUDA
  // context. Off, nothing is loaded or created. It also removed the one crash of tools/sanitize.sh:
  // libOpenCL.so.1 has thread-local storage, so its block for this thread is malloc'd when first
  // used; GCC 12's LeakSanitizer takes a dynamic TLS block 16 bytes past a page boundary for a
  // glibc 2.19 one and reads its bounds from the malloc header before it, and its tracer died scanning that bogus range at exit (tools/sanitize.sh).
  cv::ocl::setUseOpenCL(false);
  const cv::Mat img(static_cast<int>(height), static_cast<int>(width), CV_8UC1, const_cast<uint8_t*>(gray));
  cv::Mat equalised;
  cv::equalizeHist(img, equalised);
  std::vector<cv::Rect> found;
  // 1.1 / 5 neighbours are the usual frontal-face settings; 24 px is the cascade's own window.
  m_impl->cascade.detectMultiScale(equalised, found, 1.1, 5, 0, cv::Size(24, 24));
  std::vector<FaceBox> out;
  for (const cv::Rect& r : found) out.push_back(FaceBox{r.x, r.y, r.width, r.height});
  std::sort(out.begin(), out.end(), [](const FaceBox& a, const FaceBox& b) {
    return a.x != b.x ? a.x < b.x : a.y < b.y;
  });
  return out;
}

}  // namespace cnn
