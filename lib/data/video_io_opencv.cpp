// video_io.h in builds with OpenCV: VideoSource and VideoSink over the video plugin
// (video_backend.h: OpenCV's videoio is dlopen'd on first use, not linked). Trap: opening tries
// several backends (GStreamer, V4L2, FFmpeg), which print their failures on stderr: they are
// captured and said in our error (or logged at debug level when opening worked).
#include "data/video_io.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "data/stderr_capture.h"
#include "data/video_backend.h"

namespace cnn {

namespace {

struct Plugin {
  OpenVideoReaderFn open_reader = nullptr;
  OpenVideoWriterFn open_writer = nullptr;
};

// Next to the programs in a build tree (build/app/../lib, build/tests/../lib), else where this
// build put it (CNN_VIDEOIO_PLUGIN, set by lib/CMakeLists.txt).
const Plugin& plugin() {
  static Plugin p;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> paths;
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) paths.push_back((exe.parent_path().parent_path() / "lib" / "libcnn_videoio.so").string());
    paths.push_back(CNN_VIDEOIO_PLUGIN);
    std::string tried;
    for (const std::string& path : paths) {
      if (!std::filesystem::is_regular_file(path, ec)) {
        tried += "\n  " + path + ": not there";
        continue;
      }
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        tried += "\n  " + path + ": " + dlerror();
        continue;
      }
      p.open_reader = reinterpret_cast<OpenVideoReaderFn>(dlsym(h, kOpenVideoReaderSymbol));
      p.open_writer = reinterpret_cast<OpenVideoWriterFn>(dlsym(h, kOpenVideoWriterSymbol));
      if (p.open_reader && p.open_writer) return;  // kept loaded for the process's life
      tried += "\n  " + path + ": not a cnn video plugin";
    }
    failure = "video needs the plugin libcnn_videoio.so (built with OpenCV's videoio), which was not found or not "
              "loaded; looked at:" + tried;
  });
  if (!p.open_reader) CNN_THROW("{}", failure);
  return p;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "" : "; ") + l;
  return out;
}

// Runs open() with stderr captured; the captured lines and any error text in `said`.
template <typename T, typename F>
T* open_captured(F&& open, std::vector<std::string>& said) {
  std::string error;
  T* opened = nullptr;
  {
    StderrCapture capture;
    opened = open(&error);
    for (const std::string& line : capture.finish()) said.push_back(line);
  }
  if (!error.empty()) said.push_back(error);
  return opened;
}

}  // namespace

struct VideoSource::Impl {
  std::unique_ptr<VideoReaderBackend> reader;
};

VideoSource::VideoSource(const std::string& input) : m_impl(std::make_unique<Impl>()) {
  const std::optional<int> camera = camera_index(input);
  m_camera = camera.has_value();
  std::error_code ec;
  if (!m_camera && !std::filesystem::is_regular_file(input, ec)) CNN_THROW("video '{}' does not exist", input);
  const Plugin& p = plugin();
  std::vector<std::string> said;
  m_impl->reader.reset(open_captured<VideoReaderBackend>(
      [&](std::string* error) { return p.open_reader(input.c_str(), m_camera ? *camera : -1, error); }, said));
  if (!m_impl->reader) {
    const std::string why = said.empty() ? "" : " (OpenCV: " + joined(said) + ")";
    if (m_camera)
      CNN_THROW("camera {} cannot be opened: no camera with index {} is present or it is busy (on Linux: /dev/video{})"
                "{}", *camera, *camera, *camera, why);
    CNN_THROW("video '{}' cannot be opened: no OpenCV video backend reads it{}", input, why);
  }
  for (const std::string& line : said) spdlog::debug("{}: {}", input, line);
  m_width = m_impl->reader->width;
  m_height = m_impl->reader->height;
  const double fps = m_impl->reader->fps;
  m_fps = fps > 0 && fps < 1000 ? fps : 0;
}

VideoSource::~VideoSource() = default;

bool VideoSource::read(Image& frame) {
  try {
    if (!m_impl->reader->read(frame)) return false;
  } catch (const std::exception& e) {
    CNN_THROW("reading a frame: {}", e.what());
  }
  m_width = frame.width;
  m_height = frame.height;
  return true;
}

struct VideoSink::Impl {
  std::unique_ptr<VideoWriterBackend> writer;
  bool open = false;
};

VideoSink::VideoSink(const std::string& path, double fps, int64_t width, int64_t height)
    : m_impl(std::make_unique<Impl>()), m_path(path), m_width(width), m_height(height) {
  CNN_CHECK(fps > 0 && width > 0 && height > 0, "{}: a video needs fps > 0 and a size, got {} fps, {}x{}", path, fps,
            width, height);
  const Plugin& p = plugin();
  std::vector<std::string> said;
  m_impl->writer.reset(open_captured<VideoWriterBackend>(
      [&](std::string* error) { return p.open_writer(path.c_str(), fps, width, height, error); }, said));
  if (!m_impl->writer)
    CNN_THROW("{}: cannot write a Motion JPEG video there (unwritable path, or a container without MJPG: use .avi){}",
              path, said.empty() ? "" : " (OpenCV: " + joined(said) + ")");
  for (const std::string& line : said) spdlog::debug("{}: {}", path, line);
  m_impl->open = true;
}

VideoSink::~VideoSink() {
  try {
    if (m_impl->open) m_impl->writer->close();
  } catch (...) {
  }
}

void VideoSink::write(const Image& frame) {
  CNN_CHECK(m_impl->open, "{}: the video is closed", m_path);
  if (frame.width != m_width || frame.height != m_height)
    CNN_THROW("{}: a frame of {}x{} in a video of {}x{}", m_path, frame.width, frame.height, m_width, m_height);
  CNN_CHECK(frame.channels == 1 || frame.channels == 3, "{}: frames of 1 or 3 channels, not {}", m_path,
            frame.channels);
  try {
    m_impl->writer->write(frame);
  } catch (const std::exception& e) {
    CNN_THROW("{}: writing a frame: {}", m_path, e.what());
  }
}

void VideoSink::close() {
  if (!m_impl->open) return;
  m_impl->open = false;
  try {
    m_impl->writer->close();
  } catch (const std::exception& e) {
    CNN_THROW("{}: finishing the video: {}", m_path, e.what());
  }
}

}  // namespace cnn
