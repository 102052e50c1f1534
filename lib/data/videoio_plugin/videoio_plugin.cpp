// libcnn_videoio.so: OpenCV VideoCapture / VideoWriter behind data/video_backend.h, dlopen'd by
// data/video_io_opencv.cpp when a video or camera is first used (video_backend.h says why).
// Trap: OpenCV hands and takes BGR frames; ours are RGB. Trap: it links nothing of cnn_*, so it
// throws nothing of ours: OpenCV exceptions become error text, and none leaves an entry point.
#include <cstring>
#include <memory>
#include <string>

#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/videoio.hpp>

#include "data/video_backend.h"

namespace {

using cnn::Image;

class Reader : public cnn::VideoReaderBackend {
 public:
  cv::VideoCapture capture;
  cv::Mat bgr, rgb;
  bool read(Image& out) override {
    if (!capture.read(bgr) || bgr.empty()) return false;
    cv::cvtColor(bgr, rgb, bgr.channels() == 1 ? cv::COLOR_GRAY2RGB : cv::COLOR_BGR2RGB);
    out.height = rgb.rows;
    out.width = rgb.cols;
    out.channels = 3;
    out.pixels.resize(size_t(out.height * out.width * 3));
    const size_t row = size_t(out.width * 3);
    for (int y = 0; y < rgb.rows; ++y) std::memcpy(out.pixels.data() + y * row, rgb.ptr<uint8_t>(y), row);
    return true;
  }
};

class Writer : public cnn::VideoWriterBackend {
 public:
  cv::VideoWriter writer;
  cv::Mat bgr;
  void write(const Image& f) override {
    const cv::Mat view(int(f.height), int(f.width), f.channels == 1 ? CV_8UC1 : CV_8UC3,
                       const_cast<uint8_t*>(f.pixels.data()));
    cv::cvtColor(view, bgr, f.channels == 1 ? cv::COLOR_GRAY2BGR : cv::COLOR_RGB2BGR);
    writer.write(bgr);
  }
  void close() override { writer.release(); }
};

}  // namespace

extern "C" cnn::VideoReaderBackend* cnn_videoio_open_reader(const char* input, int camera_index, std::string* error) {
  try {
    auto r = std::make_unique<Reader>();
    const bool ok = camera_index >= 0 ? r->capture.open(camera_index, cv::CAP_ANY) : r->capture.open(input, cv::CAP_ANY);
    if (!ok || !r->capture.isOpened()) return nullptr;
    r->width = static_cast<int64_t>(r->capture.get(cv::CAP_PROP_FRAME_WIDTH));
    r->height = static_cast<int64_t>(r->capture.get(cv::CAP_PROP_FRAME_HEIGHT));
    r->fps = r->capture.get(cv::CAP_PROP_FPS);
    return r.release();
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
}

extern "C" cnn::VideoWriterBackend* cnn_videoio_open_writer(const char* path, double fps, int64_t width,
                                                            int64_t height, std::string* error) {
  try {
    auto w = std::make_unique<Writer>();
    const bool ok = w->writer.open(path, cv::VideoWriter::fourcc('M', 'J', 'P', 'G'), fps,
                                   cv::Size(static_cast<int>(width), static_cast<int>(height)), true);
    if (!ok || !w->writer.isOpened()) return nullptr;
    return w.release();
  } catch (const std::exception& e) {
    *error = e.what();
    return nullptr;
  }
}
