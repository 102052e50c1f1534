// Prediction on video files and cameras (see predict_video.h).
#include "eval/predict_video.h"

#include <chrono>
#include <fstream>
#include <memory>

#include "core/error.h"
#include "data/annotate.h"
#include "data/video_io.h"

namespace cnn {

nlohmann::json frame_json(int64_t frame, double time_s, int64_t width, int64_t height,
                          const std::vector<RegionPrediction>& regions) {
  nlohmann::json preds = nlohmann::json::array();
  int64_t faces = 0;
  for (const RegionPrediction& r : regions) {
    preds.push_back(region_json(r));
    faces += r.face ? 1 : 0;
  }
  return {{"frame", frame}, {"time_s", time_s},       {"width", width},
          {"height", height}, {"faces_found", faces}, {"predictions", preds}};
}

std::string frame_text(int64_t frame, double time_s, const std::vector<RegionPrediction>& regions) {
  std::string out = fmt::format("frame {} at {:.3f} s:", frame, time_s);
  if (regions.empty()) return out + " no face";
  for (size_t i = 0; i < regions.size(); ++i)
    out += fmt::format("{} {} ({})", i ? "," : "", regions[i].label(),
                       regions[i].face ? "face " + regions[i].box.to_string() : std::string("whole frame"));
  return out;
}

std::string VideoPredictSummary::to_text(const VideoPredictOptions& o) const {
  std::string out = fmt::format("{}: {} frames of {}x{} ({}), {} answers", o.input, frames, width, height,
                                fps > 0 ? fmt::format("{:g} fps", fps) : std::string("fps unknown"), answers);
  if (!o.jsonl.empty()) out += "; per-frame JSONL written to " + o.jsonl;
  if (!o.annotate.empty()) out += fmt::format("; annotated video ({:g} fps) written to {}", video_fps, o.annotate);
  return out + (stopped ? "; stopped by a signal" : "");
}

VideoPredictSummary predict_video(Predictor& predictor, const VideoPredictOptions& o, std::ostream& text) {
  VideoSource source(o.input);
  const auto opened = std::chrono::steady_clock::now();
  VideoPredictSummary s;
  s.fps = source.fps();
  s.video_fps = s.fps > 0 ? s.fps : o.camera_fps;
  std::ofstream jsonl;
  if (!o.jsonl.empty()) {
    jsonl.open(o.jsonl, std::ios::binary | std::ios::trunc);
    if (!jsonl) CNN_THROW("cannot write '{}'", o.jsonl);
  }
  std::unique_ptr<VideoSink> sink;
  Image frame;
  while (o.max_frames <= 0 || s.frames < o.max_frames) {
    if (o.stop && o.stop()) {
      s.stopped = true;
      break;
    }
    if (!source.read(frame)) break;
    const double t = !source.is_camera() && s.fps > 0
                         ? double(s.frames) / s.fps
                         : std::chrono::duration<double>(std::chrono::steady_clock::now() - opened).count();
    const std::vector<RegionPrediction> regions = predictor.predict_image(frame, o.faces, o.margin, false);
    text << frame_text(s.frames, t, regions) << "\n";
    if (jsonl.is_open()) {
      jsonl << frame_json(s.frames, t, frame.width, frame.height, regions).dump() << "\n";
      jsonl.flush();
      if (!jsonl) CNN_THROW("cannot write '{}'", o.jsonl);
    }
    if (!o.annotate.empty()) {
      if (!sink) sink = std::make_unique<VideoSink>(o.annotate, s.video_fps, frame.width, frame.height);
      sink->write(annotated_image(frame, region_labels(regions)));
    }
    if (s.frames == 0) s.width = frame.width, s.height = frame.height;
    s.answers += int64_t(regions.size());
    ++s.frames;
  }
  // A signal during a blocking read ends the stream early: that too is a stop.
  s.stopped = s.stopped || (o.stop && o.stop());
  if (sink) sink->close();
  if (s.frames == 0 && !s.stopped) CNN_THROW("'{}' gave no frame", o.input);
  return s;
}

}  // namespace cnn
