// OpenCV implementation of annotate.h: cv::rectangle and cv::putText on the RGB copy.
// Trap: OpenCV takes a colour in the Mat's channel order, and ours is RGB: colours here are (R, G, B).
#include "data/annotate.h"

#include <algorithm>
#include <cmath>

#include <opencv2/imgproc.hpp>

#include "core/error.h"
#include "data/image_decode_opencv.h"

namespace cnn {

Image annotated_image(const Image& img, const std::vector<BoxLabel>& labels) {
  cv::Mat rgb;
  if (img.channels == 1)
    cv::cvtColor(image_mat(img), rgb, cv::COLOR_GRAY2RGB);
  else
    rgb = image_mat(img).clone();
  const int side = static_cast<int>(std::min(img.height, img.width));
  const int thickness = std::max(2, side / 300);
  const double font_scale = std::max(0.4, side / 600.0);
  const cv::Scalar box_colour(0, 255, 0), text_colour(0, 0, 0);
  for (const BoxLabel& l : labels) {
    const cv::Rect box(static_cast<int>(l.box.x), static_cast<int>(l.box.y), static_cast<int>(l.box.width),
                       static_cast<int>(l.box.height));
    cv::rectangle(rgb, box, box_colour, thickness);
    if (l.text.empty()) continue;
    int baseline = 0;
    const cv::Size text = cv::getTextSize(l.text, cv::FONT_HERSHEY_SIMPLEX, font_scale, 1, &baseline);
    const int strip_h = text.height + baseline + 2 * thickness;
    // Above the box when it fits, else inside its top edge.
    const int top = box.y - strip_h >= 0 ? box.y - strip_h : box.y;
    const cv::Rect strip(box.x, top, text.width + 2 * thickness, strip_h);
    cv::rectangle(rgb, strip & cv::Rect(0, 0, rgb.cols, rgb.rows), box_colour, cv::FILLED);
    cv::putText(rgb, l.text, cv::Point(box.x + thickness, top + thickness + text.height), cv::FONT_HERSHEY_SIMPLEX,
                font_scale, text_colour, 1, cv::LINE_AA);
  }
  return mat_image(rgb);
}

}  // namespace cnn
