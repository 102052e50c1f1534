// The checked decode behind image_io.h, for the OpenCV files of lib/data only (it exposes cv::Mat;
// no public header includes it). Trap: it does not capture stderr; see stderr_capture.h.
#pragma once

#include <opencv2/core.hpp>
#include <string>

#include "data/image_io.h"

namespace cnn {

// The image at its own size, interleaved BGR (or gray), decoded from memory after the file and its
// header passed the checks of image_io.h; an empty Mat and `problem` set when they didn't.
// `decoder_failed` tells a decoder failure (the header passed) from a refusal. Throws cnn::Error
// naming the file when it can't be opened or is not a regular file.
cv::Mat decode_checked(const std::string& path, bool gray, std::string& problem, bool& decoder_failed);

// A Mat over img's pixels (no copy: it lives as long as img; channel order unchanged, RGB stays RGB).
cv::Mat image_mat(const Image& img);
// A copy of an 8-bit Mat of 1 or 3 channels (order unchanged).
Image mat_image(const cv::Mat& mat);

}  // namespace cnn
