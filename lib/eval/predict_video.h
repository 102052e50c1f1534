// cnn-eval --predict on a video file or a camera: every frame through Predictor::predict_image
// (each face, or the whole frame), one JSONL line a frame, optionally an annotated video.
// Trap: a frame without a face has no answers (an image file falls back to the whole image; a
// video frame has nothing worth classifying then). Trap: a camera runs until max_frames or stop().
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "eval/predict.h"

namespace cnn {

struct VideoPredictOptions {
  std::string input;                  // a video file, or camera:N
  std::string jsonl;                  // per-frame JSONL written here ("" none)
  std::string annotate;               // annotated video (Motion JPEG) written here ("" none)
  const FaceDetector* faces = nullptr;  // null: the whole frame is one answer
  double margin = 0.1;
  int64_t max_frames = 0;             // 0: to the end of the stream
  double camera_fps = 30;             // the annotated video's rate when the source reports none
  std::function<bool()> stop;         // polled before each frame: true ends the loop (SIGINT)
};

struct VideoPredictSummary {
  int64_t frames = 0, answers = 0, width = 0, height = 0;
  double fps = 0;        // the source's (0 unknown)
  double video_fps = 0;  // the annotated video's
  bool stopped = false;  // stop() ended it
  // "faces.avi: 6 frames of 640x480 (8 fps), 18 answers; per-frame JSONL written to v.jsonl;
  // annotated video (8 fps) written to out.avi" (and "; stopped by a signal").
  std::string to_text(const VideoPredictOptions& o) const;
};

// {"frame": i, "time_s": t, "width", "height", "faces_found", "predictions": [region_json, ...]}
nlohmann::json frame_json(int64_t frame, double time_s, int64_t width, int64_t height,
                          const std::vector<RegionPrediction>& regions);
// "frame 3 at 0.300 s: happy 81.2% (face 60x60 at (10, 20)), sad 40.0% (face ...)", "... no face",
// or "... happy 81.2% (whole frame)".
std::string frame_text(int64_t frame, double time_s, const std::vector<RegionPrediction>& regions);

// Reads every frame (time_s: frame / fps for a file with a known rate, else seconds since the
// source opened), predicts, writes `text` a frame_text line, the JSONL line and the annotated
// frame (the source's size and rate). Errors name the input or the output file.
VideoPredictSummary predict_video(Predictor& predictor, const VideoPredictOptions& o, std::ostream& text);

}  // namespace cnn
