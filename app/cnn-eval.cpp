// cnn-eval: evaluates a trained checkpoint on a data split (`cnn-eval RUN_DIR|CKPT [--split test]`),
// or classifies image files, a video or a camera (`--predict IMAGE...|VIDEO|camera:N`, every face
// with --detect-faces, drawn with --annotate OUT).
// The checkpoint is self-contained (classes, input shape, normalisation): only a split evaluation
// reads data. Trap: a run directory means its best checkpoint (last when there is no best).
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>
#include <memory>

#include "cli_common.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/face_detect.h"
#include "data/video_io.h"
#include "eval/predict.h"
#include "eval/predict_video.h"
#include "train/signals.h"

using namespace cnn;

struct EvalArgs {
  std::vector<std::string> autotune_sets;  // train.autotune.* from the autotune flags
  std::string target, split = "test", data, json, device = "auto", cascade, precision, annotate;
  std::vector<std::string> predict;
  int64_t batch = 0, max_frames = 0;
  double face_margin = 0.1;
  bool ten_crop = false, no_ten_crop = false, detect_faces = false, quiet = false, face_margin_given = false;
};

static void write_json(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text << "\n";
  f.close();
  if (!f) CNN_THROW("cannot write '{}'", path);
}

static void usage_error(const char* option, const std::string& message) {
  throw ConfigError({"<command line>"}, option, message);
}

// True when --predict names a video or a camera; the combinations the README allows, else exit 2.
static bool check_predict_args(const EvalArgs& a) {
  if (a.detect_faces && a.predict.empty())
    usage_error("--detect-faces", "--detect-faces needs images to classify: add --predict IMAGE...");
  if (a.face_margin_given && !a.detect_faces)
    usage_error("--face-margin", "--face-margin sets the margin around a detected face: it needs --detect-faces");
  if (!a.annotate.empty() && a.predict.size() != 1)
    usage_error("--annotate", fmt::format("--annotate draws on one input: give --predict one image, video or "
                                          "camera:N, not {}", a.predict.size()));
  bool video = false;
  for (const std::string& p : a.predict) video = video || camera_index(p) || is_video_path(p);
  if (video && a.predict.size() != 1)
    usage_error("--predict", "a video or camera:N is read alone: give it as the only --predict input");
  if (a.max_frames > 0 && !video) usage_error("--max-frames", "--max-frames needs a video or camera:N to --predict");
  if (!a.annotate.empty() && video != is_video_path(a.annotate))
    usage_error("--annotate", video ? fmt::format("a video is annotated into a video: expected a name like out.avi, "
                                                  "found '{}'", a.annotate)
                                    : fmt::format("an image is annotated into an image: expected a name like "
                                                  "out.png, found '{}'", a.annotate));
  return video;
}

static int run_predict(const EvalArgs& a, bool video, TrainedModel& m, const Normalization& norm) {
  std::unique_ptr<FaceDetector> faces;
  if (a.detect_faces) {
    faces = std::make_unique<FaceDetector>(a.cascade);
    spdlog::info("face cascade: {}", faces->cascade_path());
  }
  Predictor predictor(m.ex(), m.spec, norm, m.ten_crop, m.class_names);
  if (video) {
    VideoPredictOptions o;
    o.input = a.predict.front(), o.jsonl = a.json, o.annotate = a.annotate;
    o.faces = faces.get(), o.margin = a.face_margin, o.max_frames = a.max_frames;
    o.stop = [] { return stop_requested() != 0; };
    install_stop_handlers();  // Ctrl-C ends a camera run with its JSONL and video complete
    struct Uninstall {
      ~Uninstall() { uninstall_stop_handlers(); }
    } uninstall;
    const VideoPredictSummary s = predict_video(predictor, o, std::cout);
    std::cout << s.to_text(o) << "\n";
    return s.stopped ? 128 + stop_requested() : 0;
  }
  std::vector<ImagePrediction> preds = predictor.predict_files(a.predict, faces.get(), a.face_margin);
  for (const ImagePrediction& p : preds) std::cout << p.to_text();
  if (!a.json.empty()) write_json(a.json, predictions_to_json(preds, m));
  if (!a.annotate.empty()) {
    write_annotated_image(preds.front(), a.annotate);
    std::cout << "annotated image written to " << a.annotate << "\n";
  }
  return 0;
}

static int run_eval(const EvalArgs& a) {
  const bool video = check_predict_args(a);
  std::vector<std::string> sets;
  if (a.batch > 0) sets.push_back(fmt::format("eval.batch_size={}", a.batch));
  if (a.ten_crop) sets.push_back("eval.ten_crop=true");
  if (a.no_ten_crop) sets.push_back("eval.ten_crop=false");
  for (const std::string& s : app::precision_override(a.precision)) sets.push_back(s);
  sets.insert(sets.end(), a.autotune_sets.begin(), a.autotune_sets.end());
  TrainedModel m = load_trained_model(a.target, a.device, sets);
  if (!a.data.empty()) m.spec.data.path = a.data;
  const char* why = m.which == "best"   ? " (the run's best checkpoint)"
                    : m.which == "last" ? " (the run's last checkpoint: it has no best.safetensors)"
                                        : "";
  std::cout << "checkpoint: " << m.checkpoint << why << "\n";
  std::cout << "evaluation: " << describe_eval_crops(m.spec, m.ten_crop) << "\n";
  std::cout << "precision: " << m.spec.train.precision << (a.precision.empty() ? " (the checkpoint's)" : " (--precision)")
            << "\n";

  // Only a split evaluation reads data (and a checkpoint too old to record its normalisation).
  DataSplits data;
  const bool need_data = a.predict.empty() || needs_training_data(m);
  if (need_data) {
    data = load_dataset(m.spec.data, m.spec.input, m.spec.classes);
    for (const auto& note : data.notes) spdlog::info("data: {}", note);
    use_data_class_names(m, data);
  }
  std::string norm_source;
  Normalization norm = eval_normalization(m, need_data ? &data : nullptr, &norm_source);
  spdlog::info("normalisation: {} ({})", norm.to_string(), norm_source);

  if (!a.predict.empty()) return run_predict(a, video, m, norm);
  EvalReport report = evaluate_split(m, data, norm, a.split);
  std::cout << report.to_table();
  if (!a.json.empty()) {
    write_json(a.json, eval_report_json(report, m));
    std::cout << "report written to " << a.json << "\n";
  }
  return 0;
}

int main(int argc, char** argv) {
  CLI::App cli{"cnn-eval: evaluate a trained checkpoint on a data split, or classify images"};
  app::add_version_flag(cli, "cnn-eval");
  app::AutotuneFlags tune;
  app::add_autotune_flags(cli, tune);
  EvalArgs a;
  cli.add_option("checkpoint", a.target, "run directory (its best checkpoint, else last) or checkpoint file")
      ->required();
  cli.add_option("--split", a.split, "split to evaluate: test, val or train (default test)")
      ->check(CLI::IsMember({"train", "val", "test"}));
  cli.add_option("--data", a.data, "data path instead of the run's data.path");
  cli.add_option("--json", a.json, "write the report (or the predictions; JSONL for a video) as JSON to this file");
  cli.add_option("--batch", a.batch, "rows per forward pass (overrides eval.batch_size)")->check(CLI::PositiveNumber);
  cli.add_option("--device", a.device, "auto | cpu | cuda (auto: the GPU when one is usable)");
  app::add_precision_option(cli, a.precision, "the checkpoint's");
  CLI::Option* ten = cli.add_flag("--ten-crop", a.ten_crop,
                                  "average the predictions over ten crops (as eval.ten_crop: true); needs a crop "
                                  "smaller than the input");
  cli.add_flag("--no-ten-crop", a.no_ten_crop,
               "the centre crop alone though the run has eval.ten_crop: true (what cnn-ckpt export's model computes)")
      ->excludes(ten);
  cli.add_option("--predict", a.predict,
                 "classify these image files, or one video file or camera:N, instead of evaluating a split");
  cli.add_flag("--detect-faces", a.detect_faces, "with --predict: classify every face found (Haar cascade)");
  cli.add_option("--annotate", a.annotate,
                 "with --predict: draw the boxes and labels into this image (an image input) or .avi (a video)");
  cli.add_option("--max-frames", a.max_frames, "with a video or camera: stop after this many frames")
      ->check(CLI::PositiveNumber);
  cli.add_option("--cascade", a.cascade, "Haar cascade XML for --detect-faces (default: searched)");
  cli.add_option("--face-margin", a.face_margin, "with --detect-faces: margin around the face, fraction of its side")
      ->check(CLI::Range(0.0, 2.0))
      ->each([&](const std::string&) { a.face_margin_given = true; });
  cli.add_flag("--quiet", a.quiet, "only warnings and errors on stderr");
  return app::guarded_main("cnn-eval", cli, argc, argv, [&]() -> int {
    app::setup_logging(a.quiet);
    a.autotune_sets = app::autotune_overrides(tune);
    return run_eval(a);
  });
}
