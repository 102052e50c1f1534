// The interface between video_io.h and the video plugin, libcnn_videoio.so (lib/data/videoio_plugin/),
// which alone links OpenCV's videoio. videoio pulls in FFmpeg and GStreamer, and FFmpeg's libavutil
// libOpenCL: linked into cnn_data, every program (cnn-train too) loaded about 100 more libraries at
// start, libOpenCL.so.1 among them. Loaded with dlopen when a video or camera is first opened,
// they stay out of every other run. For lib/data only; no OpenCV types cross it.
// Trap: the plugin links nothing of ours (no cnn::Error, no logger): it reports errors as text.
#pragma once

#include <cstdint>
#include <string>

#include "data/image_io.h"

namespace cnn {

class VideoReaderBackend {
 public:
  virtual ~VideoReaderBackend() = default;
  // The next frame, RGB; false at the end of the stream.
  virtual bool read(Image& rgb) = 0;
  int64_t width = 0, height = 0;
  double fps = 0;  // as reported (0 or less: unknown)
};

class VideoWriterBackend {
 public:
  virtual ~VideoWriterBackend() = default;
  virtual void write(const Image& frame) = 0;  // gray or RGB, the size opened with
  virtual void close() = 0;
};

// The plugin's two entry points (extern "C", so dlsym finds them by these names). Null and
// `error` set when the input or output can't be opened.
using OpenVideoReaderFn = VideoReaderBackend* (*)(const char* input, int camera_index, std::string* error);
using OpenVideoWriterFn = VideoWriterBackend* (*)(const char* path, double fps, int64_t width, int64_t height,
                                                  std::string* error);
constexpr const char* kOpenVideoReaderSymbol = "cnn_videoio_open_reader";  // camera_index < 0: a file
constexpr const char* kOpenVideoWriterSymbol = "cnn_videoio_open_writer";

}  // namespace cnn
