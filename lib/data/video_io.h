// Video files and cameras, frame by frame (OpenCV VideoCapture / VideoWriter), for
// `cnn-eval --predict VIDEO|camera:N` and its annotated video. Frames are RGB Images.
// Trap: a file's fps is what its container states (0 when it states none); the frame count is
// only known by reading to the end. Trap: without OpenCV (video_io_noopencv.cpp) opening throws.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/image_io.h"

namespace cnn {

// "camera:N" -> N; any other input -> nothing. "camera:" followed by anything but a
// non-negative integer is a ConfigError (key --predict).
std::optional<int> camera_index(const std::string& input);
// True when the name ends in a video extension (.avi .mp4 .mkv .mov .webm .m4v .mpg .mpeg .wmv,
// any case): --predict then reads it frame by frame instead of as one image.
bool is_video_path(const std::string& path);

class VideoSource {
 public:
  // A camera (camera_index) or a video file. Error naming the file when it does not exist or no
  // backend can read it, and naming the index ("camera 0 cannot be opened ...") for a camera.
  explicit VideoSource(const std::string& input);
  ~VideoSource();
  VideoSource(const VideoSource&) = delete;
  VideoSource& operator=(const VideoSource&) = delete;

  bool is_camera() const { return m_camera; }
  int64_t width() const { return m_width; }
  int64_t height() const { return m_height; }
  double fps() const { return m_fps; }  // as reported; 0 when unknown
  // The next frame (RGB, width x height); false at the end of the stream.
  bool read(Image& frame);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
  bool m_camera = false;
  int64_t m_width = 0, m_height = 0;
  double m_fps = 0;
};

class VideoSink {
 public:
  // Motion JPEG (fourcc MJPG) at `fps` in the container the extension names (.avi is the safe one).
  // Error naming the path when no backend can write it.
  VideoSink(const std::string& path, double fps, int64_t width, int64_t height);
  ~VideoSink();  // closes, never throws
  VideoSink(const VideoSink&) = delete;
  VideoSink& operator=(const VideoSink&) = delete;

  // One frame of exactly width x height, gray or RGB.
  void write(const Image& frame);
  // Finishes the file (its index); writing after it is an error.
  void close();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
  std::string m_path;
  int64_t m_width = 0, m_height = 0;
};

}  // namespace cnn
