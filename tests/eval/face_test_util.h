// Pictures with faces OpenCV's Haar cascade really finds, for the tests of prediction on faces:
// synthetic cartoon faces (data/synthetic_faces.h) on a flat border, the first of them the
// cascade finds alone, tiled into a row. Trap: which synthetic face is found depends on the
// cascade file, so tests take the first found and check the tiled picture before using it.
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>

#include "data/face_detect.h"
#include "data/image_io.h"
#include "data/synthetic_faces.h"

namespace cnn::test {

// True when this build has OpenCV and a Haar face cascade is installed.
inline bool have_face_detection() {
  if (!image_io_available()) return false;
  try {
    find_face_cascade();
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// A gray (size + 2 * border)^2 picture holding one synthetic face of size x size that `det`
// finds exactly once; nothing when none of the first 32 is found.
inline std::optional<Image> detectable_face(const FaceDetector& det, int64_t size = 96, int64_t border = 24) {
  const Dataset faces = make_synthetic_faces(32, 7, 1, size, size, 11);
  for (int64_t i = 0; i < faces.size(); ++i) {
    Image img;
    img.height = img.width = size + 2 * border;
    img.channels = 1;
    img.pixels.assign(size_t(img.height * img.width), 90);
    for (int64_t y = 0; y < size; ++y)
      std::memcpy(img.pixels.data() + (y + border) * img.width + border, faces.sample(i) + y * size, size_t(size));
    if (det.faces(img).size() == 1) return img;
  }
  return std::nullopt;
}

// n copies of `tile` (gray) side by side, left to right, on one gray canvas.
inline Image tiled(const Image& tile, int64_t n) {
  Image img;
  img.height = tile.height;
  img.width = tile.width * n;
  img.channels = 1;
  img.pixels.resize(size_t(img.height * img.width));
  for (int64_t k = 0; k < n; ++k)
    for (int64_t y = 0; y < tile.height; ++y)
      std::memcpy(img.pixels.data() + y * img.width + k * tile.width, tile.pixels.data() + y * tile.width,
                  size_t(tile.width));
  return img;
}

}  // namespace cnn::test
