// Boxes and labels drawn on an image (cnn-eval --annotate): a rectangle around each region and its
// label ("happy 87.3%") on a filled strip above it, or just inside its top edge when the box
// touches the top of the image. Trap: without OpenCV (annotate_noopencv.cpp) drawing throws.
#pragma once

#include <string>
#include <vector>

#include "data/face_detect.h"
#include "data/image_io.h"

namespace cnn {

struct BoxLabel {
  FaceBox box;       // pixels of the image drawn on
  std::string text;  // ASCII (the Hershey font has no other glyphs)
};

// A 3-channel (RGB) copy of img, a gray image replicated, with every box and label drawn; line width
// and text size grow with the image (about 1 px per 300 px of its shorter side, at least 2).
Image annotated_image(const Image& img, const std::vector<BoxLabel>& labels);

}  // namespace cnn
