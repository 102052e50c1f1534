// The OpenCV-free half of face_detect.h: crop arithmetic, the cascade search, and what FaceDetector
// builds on its detection (the largest face, the crop of a file).
// Trap: a face near the border keeps its square side and is shifted inward, not clipped, so the
// crop's aspect ratio always matches the square network input.
#include "data/face_detect.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"

namespace cnn {

std::string FaceBox::to_string() const { return fmt::format("{}x{} at ({}, {})", width, height, x, y); }

FaceBox square_face_crop(const FaceBox& face, double margin, int64_t image_height, int64_t image_width) {
  CNN_CHECK(image_height > 0 && image_width > 0, "image of {}x{} pixels", image_width, image_height);
  CNN_CHECK(margin >= 0, "negative face margin {}", margin);
  const double want = double(std::max(face.width, face.height)) * (1.0 + 2.0 * margin);
  const int64_t side = std::clamp<int64_t>(std::llround(want), 1, std::min(image_height, image_width));
  auto place = [side](int64_t start, int64_t length, int64_t limit) {
    const double centre = double(start) + double(length) / 2.0;
    return std::clamp<int64_t>(std::llround(centre - double(side) / 2.0), 0, limit - side);
  };
  return FaceBox{place(face.x, face.width, image_width), place(face.y, face.height, image_height), side, side};
}

std::vector<std::string> face_cascade_search_paths() {
  const char* file = "haarcascade_frontalface_default.xml";
  std::vector<std::string> dirs = {"/usr/share/opencv4/haarcascades",       "/usr/share/opencv/haarcascades",
                                   "/usr/local/share/opencv4/haarcascades", "/usr/local/share/opencv/haarcascades",
                                   "/usr/share/OpenCV/haarcascades",        "/opt/homebrew/share/opencv4/haarcascades"};
  std::vector<std::string> paths;
  for (const auto& d : dirs) paths.push_back(d + "/" + file);
  return paths;
}

std::string find_face_cascade(const std::string& explicit_path) {
  std::error_code ec;
  if (!explicit_path.empty()) {
    if (!std::filesystem::is_regular_file(explicit_path, ec))
      CNN_THROW("face cascade '{}' does not exist", explicit_path);
    return explicit_path;
  }
  std::vector<std::string> paths = face_cascade_search_paths();
  for (const auto& p : paths)
    if (std::filesystem::is_regular_file(p, ec)) return p;
  std::string tried;
  for (const auto& p : paths) tried += "\n  " + p;
  CNN_THROW("no Haar face cascade found (install opencv-data, or give --cascade FILE); looked at:{}", tried);
}

std::vector<FaceBox> FaceDetector::faces(const Image& img) const {
  if (img.channels == 1) return faces(img.pixels.data(), img.height, img.width);
  const Image gray = gray_image(img);
  return faces(gray.pixels.data(), gray.height, gray.width);
}

std::optional<FaceBox> FaceDetector::largest_face(const uint8_t* gray, int64_t height, int64_t width) const {
  const std::vector<FaceBox> all = faces(gray, height, width);
  if (all.empty()) return std::nullopt;
  return *std::max_element(all.begin(), all.end(), [](const FaceBox& a, const FaceBox& b) {
    return a.width * a.height < b.width * b.height;
  });
}

FaceImage FaceDetector::read_face(const std::string& path, double margin, bool gray, int64_t channels, int64_t height,
                                  int64_t width, uint8_t* dst) const {
  CNN_CHECK(channels == 1 || channels == 3, "images are read with 1 or 3 channels, not {}", channels);
  CNN_CHECK(!(channels == 1 && !gray), "an RGB read needs 3 channels");
  const Image img = read_image(path, gray);
  FaceImage out;
  out.image_height = img.height;
  out.image_width = img.width;
  out.crop = FaceBox{0, 0, img.width, img.height};
  const Image luma = gray_image(img);
  if (std::optional<FaceBox> face = largest_face(luma.pixels.data(), luma.height, luma.width)) {
    out.found = true;
    out.face = *face;
    out.crop = square_face_crop(*face, margin, img.height, img.width);
  }
  const FaceBox& c = out.crop;
  resize_region(img, c.x, c.y, c.width, c.height, channels, height, width, dst);
  return out;
}

}  // namespace cnn
