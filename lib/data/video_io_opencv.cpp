// OpenCV implementation of video_io.h. Trap: OpenCV hands and takes BGR frames; ours are RGB.
// Trap: opening tries several backends (GStreamer, V4L2, FFmpeg), which print their failures on
// stderr: they are captured and said in our error (or logged at debug level when opening worked).
#include "data/video_io.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include <opencv2/imgproc.hpp>
#include <opencv2/videoio.hpp>

#include "core/error.h"
#include "data/image_decode_opencv.h"
#include "data/stderr_capture.h"

namespace cnn {

namespace {

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "; ") + l;
  return out;
}

}  // namespace

struct VideoSource::Impl {
  cv::VideoCapture capture;
  cv::Mat bgr;
};

VideoSource::VideoSource(const std::string& input) : m_impl(std::make_unique<Impl>()) {
  const std::optional<int> camera = camera_index(input);
  m_camera = camera.has_value();
  std::error_code ec;
  if (!m_camera && !std::filesystem::is_regular_file(input, ec)) CNN_THROW("video '{}' does not exist", input);
  bool opened = false;
  std::vector<std::string> said;
  {
    StderrCapture capture;
    try {
      opened = m_camera ? m_impl->capture.open(*camera, cv::CAP_ANY) : m_impl->capture.open(input, cv::CAP_ANY);
    } catch (const cv::Exception& e) {
      said.push_back(e.what());
    }
    for (const std::string& line : capture.finish()) said.push_back(line);
  }
  opened = opened && m_impl->capture.isOpened();
  if (!opened) {
    const std::string why = said.empty() ? "" : " (OpenCV: " + joined(said) + ")";
    if (m_camera)
      CNN_THROW("camera {} cannot be opened: no camera with index {} is present or it is busy (on Linux: /dev/video{})"
                "{}", *camera, *camera, *camera, why);
    CNN_THROW("video '{}' cannot be opened: no OpenCV video backend reads it{}", input, why);
  }
  for (const std::string& line : said) spdlog::debug("{}: {}", input, line);
  m_width = static_cast<int64_t>(m_impl->capture.get(cv::CAP_PROP_FRAME_WIDTH));
  m_height = static_cast<int64_t>(m_impl->capture.get(cv::CAP_PROP_FRAME_HEIGHT));
  const double fps = m_impl->capture.get(cv::CAP_PROP_FPS);
  m_fps = fps > 0 && fps < 1000 ? fps : 0;
}

VideoSource::~VideoSource() = default;

bool VideoSource::read(Image& frame) {
  if (!m_impl->capture.read(m_impl->bgr) || m_impl->bgr.empty()) return false;
  cv::Mat rgb;
  cv::cvtColor(m_impl->bgr, rgb, m_impl->bgr.channels() == 1 ? cv::COLOR_GRAY2RGB : cv::COLOR_BGR2RGB);
  frame = mat_image(rgb);
  m_width = frame.width;
  m_height = frame.height;
  return true;
}

struct VideoSink::Impl {
  cv::VideoWriter writer;
  cv::Mat bgr;
};

VideoSink::VideoSink(const std::string& path, double fps, int64_t width, int64_t height)
    : m_impl(std::make_unique<Impl>()), m_path(path), m_width(width), m_height(height) {
  CNN_CHECK(fps > 0 && width > 0 && height > 0, "{}: a video needs fps > 0 and a size, got {} fps, {}x{}", path, fps,
            width, height);
  bool opened = false;
  std::vector<std::string> said;
  {
    StderrCapture capture;
    try {
      opened = m_impl->writer.open(path, cv::VideoWriter::fourcc('M', 'J', 'P', 'G'), fps,
                                   cv::Size(static_cast<int>(width), static_cast<int>(height)), true);
    } catch (const cv::Exception& e) {
      said.push_back(e.what());
    }
    for (const std::string& line : capture.finish()) said.push_back(line);
  }
  if (!opened || !m_impl->writer.isOpened())
    CNN_THROW("{}: cannot write a Motion JPEG video there (unwritable path, or a container without MJPG: use .avi){}",
              path, said.empty() ? "" : " (OpenCV: " + joined(said) + ")");
  for (const std::string& line : said) spdlog::debug("{}: {}", path, line);
}

VideoSink::~VideoSink() {
  try {
    m_impl->writer.release();
  } catch (...) {
  }
}

void VideoSink::write(const Image& frame) {
  CNN_CHECK(m_impl->writer.isOpened(), "{}: the video is closed", m_path);
  if (frame.width != m_width || frame.height != m_height)
    CNN_THROW("{}: a frame of {}x{} in a video of {}x{}", m_path, frame.width, frame.height, m_width, m_height);
  cv::cvtColor(image_mat(frame), m_impl->bgr, frame.channels == 1 ? cv::COLOR_GRAY2BGR : cv::COLOR_RGB2BGR);
  m_impl->writer.write(m_impl->bgr);
}

void VideoSink::close() { m_impl->writer.release(); }

}  // namespace cnn
