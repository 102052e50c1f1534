// Stand-in for face_detect_opencv.cpp in builds without OpenCV: face detection is an error.
#include "core/error.h"
#include "data/face_detect.h"

namespace cnn {

struct FaceDetector::Impl {};

FaceDetector::FaceDetector(const std::string&) {
  CNN_THROW("face detection needs OpenCV, and this build has none (rebuild with -DCNN_WITH_OPENCV=ON)");
}

FaceDetector::~FaceDetector() = default;

std::vector<FaceBox> FaceDetector::faces(const uint8_t*, int64_t, int64_t) const {
  CNN_THROW("face detection needs OpenCV, and this build has none");
}

}  // namespace cnn
