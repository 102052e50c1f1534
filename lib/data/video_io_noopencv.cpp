// Stand-in for video_io_opencv.cpp in builds without OpenCV: video is an error.
#include "core/error.h"
#include "data/video_io.h"

namespace cnn {

struct VideoSource::Impl {};

VideoSource::VideoSource(const std::string& input) {
  CNN_THROW("{}: reading video or a camera needs OpenCV, and this build has none (rebuild with -DCNN_WITH_OPENCV=ON)",
            input);
}

VideoSource::~VideoSource() = default;

bool VideoSource::read(Image&) { CNN_THROW("reading video needs OpenCV, and this build has none"); }

struct VideoSink::Impl {};

VideoSink::VideoSink(const std::string& path, double, int64_t, int64_t) {
  CNN_THROW("{}: writing video needs OpenCV, and this build has none (rebuild with -DCNN_WITH_OPENCV=ON)", path);
}

VideoSink::~VideoSink() = default;

void VideoSink::write(const Image&) { CNN_THROW("writing video needs OpenCV, and this build has none"); }

void VideoSink::close() {}

}  // namespace cnn
