// Stand-in for annotate_opencv.cpp in builds without OpenCV: drawing is an error.
#include "core/error.h"
#include "data/annotate.h"

namespace cnn {

Image annotated_image(const Image&, const std::vector<BoxLabel>&) {
  CNN_THROW("drawing boxes and labels (--annotate) needs OpenCV, and this build has none "
            "(rebuild with -DCNN_WITH_OPENCV=ON)");
}

}  // namespace cnn
