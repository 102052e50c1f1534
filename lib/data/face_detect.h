// Finding the frontal faces in a photo or a video frame (OpenCV's Haar cascade) and cutting a
// square crop around each, so a camera picture looks like a FER2013 sample before it meets the network.
// Trap: without OpenCV in the build (face_detect_noopencv.cpp) constructing a FaceDetector throws;
// square_face_crop and the cascade search are plain arithmetic and file checks, available always.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/image_io.h"

namespace cnn {

struct FaceBox {
  int64_t x = 0, y = 0, width = 0, height = 0;  // pixels, top-left origin
  std::string to_string() const;                // "120x120 at (40, 32)"
};

// The square around `face`: side max(width, height) * (1 + 2 * margin), centred on the face,
// shrunk to fit the image and then shifted to lie inside it.
FaceBox square_face_crop(const FaceBox& face, double margin, int64_t image_height, int64_t image_width);

// Where Debian/Ubuntu (opencv-data), Homebrew and source installs put
// haarcascade_frontalface_default.xml, in search order.
std::vector<std::string> face_cascade_search_paths();
// `explicit_path` when given (Error when it does not exist), else the first search path that
// exists (Error listing the places looked at when none does).
std::string find_face_cascade(const std::string& explicit_path = "");

// What FaceDetector::read_face wrote.
struct FaceImage {
  bool found = false;  // false: no face, dst holds the whole image
  FaceBox face;        // the detected face (found only)
  FaceBox crop;        // the region that was resized into dst (the whole image when !found)
  int64_t image_height = 0, image_width = 0;
};

class FaceDetector {
 public:
  // Loads the cascade (see find_face_cascade). Error when it can't be loaded or the build has no OpenCV.
  explicit FaceDetector(const std::string& cascade_path = "");
  ~FaceDetector();
  FaceDetector(const FaceDetector&) = delete;
  FaceDetector& operator=(const FaceDetector&) = delete;

  const std::string& cascade_path() const { return m_cascade_path; }
  // Every face of a gray image, left to right (equal x: top to bottom); empty when there is none.
  std::vector<FaceBox> faces(const uint8_t* gray,  // (height, width)
                             int64_t height, int64_t width) const;
  // faces() of the image, an RGB one seen through its luma (gray_image).
  std::vector<FaceBox> faces(const Image& img) const;
  // The largest face of a gray image (the first of equals), or nothing.
  std::optional<FaceBox> largest_face(const uint8_t* gray,  // (height, width)
                                      int64_t height, int64_t width) const;
  // Reads the image file (gray or RGB, like read_image_file), finds its largest face, and writes
  // the square crop with `margin` (or the whole image when there is no face) resized to
  // (channels, height, width). Error naming the file when it can't be read.
  FaceImage read_face(const std::string& path, double margin, bool gray, int64_t channels, int64_t height,
                      int64_t width,
                      uint8_t* dst) const;  // (channels, height, width)

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
  std::string m_cascade_path;
};

}  // namespace cnn
